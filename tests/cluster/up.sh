#!/usr/bin/env bash
# Starts the local control plane (etcd, kube-apiserver with RBAC and audit,
# kube-controller-manager, kube-scheduler, kwok with fake nodes) on 127.0.0.1.
#
# Idempotent: if the cluster recorded in .cluster/ is up and ready, it only says so.
# State lives in $KITE_CLUSTER_DIR (default: <repo>/.cluster); `down.sh` removes it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${KITE_CLUSTER_DIR:-$repo/.cluster}
# shellcheck source=lib.sh
. "$here/lib.sh"

if cluster_ready; then
  echo "cluster already running: export KUBECONFIG=$state/kubeconfig"
  exit 0
fi
if [ -d "$state" ]; then
  echo "found a stale cluster state in $state; stopping it first" >&2
  "$here/down.sh" >&2
fi

start=$SECONDS
bins=$("$here/build.sh")
bin_of() { echo "$bins" | sed -n "s/^$1=//p"; }
etcd_bin=$(bin_of etcd)/etcd
kwok_dir=$(bin_of kwok)
kube_dir=$(bin_of kube)

for port in $ETCD_PORT $ETCD_PEER_PORT $APISERVER_PORT $KCM_PORT $SCHED_PORT $KWOK_PORT; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port 127.0.0.1:$port is already in use (another cluster? set KITE_CLUSTER_PORT_BASE)" >&2
    exit 1
  fi
done

mkdir -p "$state"/{pki,logs,pids,etcd}
"$here/pki.sh" "$state/pki"
write_config

spawn etcd "$etcd_bin" \
  --name=kite --data-dir="$state/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="kite=http://127.0.0.1:$ETCD_PEER_PORT" \
  --listen-metrics-urls="" --unsafe-no-fsync --quota-backend-bytes=4294967296
wait_for "etcd" curl -sf "http://127.0.0.1:$ETCD_PORT/health"

start_apiserver "$kube_dir"
wait_for "kube-apiserver /readyz" curl -sf --cacert "$state/pki/ca.crt" \
  -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/readyz"

spawn kube-controller-manager "$kube_dir/kube-controller-manager" \
  --kubeconfig="$state/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$state/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$state/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
  --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$state/pki/sa.key" --root-ca-file="$state/pki/ca.crt" \
  --cluster-signing-cert-file="$state/pki/ca.crt" --cluster-signing-key-file="$state/pki/ca.key" \
  --controllers='*' --concurrent-gc-syncs=5 --node-monitor-grace-period=5m

spawn kube-scheduler "$kube_dir/kube-scheduler" \
  --kubeconfig="$state/scheduler.kubeconfig" \
  --authentication-kubeconfig="$state/scheduler.kubeconfig" \
  --authorization-kubeconfig="$state/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false

# Node leases are the fake nodes' heartbeat: kwok's "fast" stages refresh node status only
# every 10 minutes and expect leases in between. Without them the node lifecycle
# controller sees stale nodes, marks them NotReady for a moment, and pods turn unready.
spawn kwok "$kwok_dir/kwok" \
  --kubeconfig="$state/kubeconfig" --manage-all-nodes=true --config="$kwok_dir/stages.yaml" \
  --server-address="127.0.0.1:$KWOK_PORT" --node-ip=127.0.0.1 --node-lease-duration-seconds=40

kc() { kubectl --kubeconfig "$state/kubeconfig" "$@"; }
for i in 0 1; do
  kc apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "1000"}
  capacity: {cpu: "32", memory: 256Gi, pods: "1000"}
NODE
done
wait_for "2 Ready nodes" nodes_ready 2
wait_for "the default ServiceAccount" kc get serviceaccount default -n default

echo "cluster ready in $((SECONDS - start)) s"
cat <<MSG

  export KUBECONFIG=$state/kubeconfig
  kubectl get nodes

  API server:   $APISERVER_URL (admin token in $state/tokens.csv)
  Unprivileged: $state/kubeconfig-unprivileged (user "kite-unprivileged")
  Audit log:    $state/audit.log
  Logs:         $state/logs/
  Stop with:    make cluster-down
MSG
