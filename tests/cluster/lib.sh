# Shared settings and helpers of up.sh and down.sh. Sourced, not run.
# Expects $state (the cluster state directory) to be set.

base=${KITE_CLUSTER_PORT_BASE:-36000}
ETCD_PORT=$((base + 379))
ETCD_PEER_PORT=$((base + 380))
APISERVER_PORT=$((base + 443))
KCM_PORT=$((base + 257))
SCHED_PORT=$((base + 259))
KWOK_PORT=$((base + 247))
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
ADMIN_TOKEN=$( [ -f "$state/tokens.csv" ] && sed -n 's/^\([^,]*\),kite-admin,.*/\1/p' "$state/tokens.csv" || true)

# spawn NAME BIN ARGS...: starts a component in its own session, logs to logs/NAME.log,
# and records its pid so that down.sh stops exactly what we started.
spawn() {
  local name=$1; shift
  setsid "$@" >"$state/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$state/pids/$name.pid"
}

# wait_for WHAT CMD...: polls CMD until it succeeds; fails after ${KITE_CLUSTER_TIMEOUT:-120} s.
wait_for() {
  local what=$1; shift
  local deadline=$((SECONDS + ${KITE_CLUSTER_TIMEOUT:-120}))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "timed out waiting for $what; see $state/logs/" >&2
      tail -n 20 "$state"/logs/*.log >&2 || true
      return 1
    fi
    check_alive
    sleep 0.5
  done
}

# check_alive: fails at once if a component we started has exited.
check_alive() {
  local f
  for f in "$state"/pids/*.pid; do
    [ -e "$f" ] || continue
    if ! kill -0 "$(cat "$f")" 2>/dev/null; then
      local name; name=$(basename "$f" .pid)
      echo "$name exited; last lines of $state/logs/$name.log:" >&2
      tail -n 30 "$state/logs/$name.log" >&2 || true
      return 1
    fi
  done
}

nodes_ready() {
  local want=$1
  local n
  n=$(kubectl --kubeconfig "$state/kubeconfig" get nodes \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c '^True$')
  [ "$n" -ge "$want" ]
}

# cluster_ready: every recorded component is alive and the API server is ready.
cluster_ready() {
  [ -f "$state/kubeconfig" ] && [ -n "$ADMIN_TOKEN" ] || return 1
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    [ -f "$state/pids/$name.pid" ] && kill -0 "$(cat "$state/pids/$name.pid")" 2>/dev/null || return 1
  done
  curl -sf --max-time 5 --cacert "$state/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "$APISERVER_URL/readyz" >/dev/null
}

# kubeconfig FILE USER TOKEN
kubeconfig() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: kite-local
  cluster:
    server: $APISERVER_URL
    certificate-authority: $state/pki/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: kite-local
  context: {cluster: kite-local, user: $2, namespace: default}
current-context: kite-local
KC
}

# write_config: tokens, kubeconfigs and the audit policy.
write_config() {
  local admin unpriv kcm sched
  admin=$(openssl rand -hex 24); unpriv=$(openssl rand -hex 24)
  kcm=$(openssl rand -hex 24); sched=$(openssl rand -hex 24)
  # token,user,uid,"groups"
  cat >"$state/tokens.csv" <<TOK
$admin,kite-admin,kite-admin,"system:masters"
$unpriv,kite-unprivileged,kite-unprivileged,"kite:users"
$kcm,system:kube-controller-manager,system:kube-controller-manager
$sched,system:kube-scheduler,system:kube-scheduler
TOK
  chmod 600 "$state/tokens.csv"
  ADMIN_TOKEN=$admin
  kubeconfig "$state/kubeconfig" kite-admin "$admin"
  kubeconfig "$state/kubeconfig-unprivileged" kite-unprivileged "$unpriv"
  kubeconfig "$state/controller-manager.kubeconfig" system:kube-controller-manager "$kcm"
  kubeconfig "$state/scheduler.kubeconfig" system:kube-scheduler "$sched"
  # Every request's user, verb, resource, namespace and response code, at Metadata level.
  cat >"$state/audit-policy.yaml" <<POL
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
POL
}

start_apiserver() {
  local kube_dir=$1
  spawn kube-apiserver "$kube_dir/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$state/pki/apiserver.crt" --tls-private-key-file="$state/pki/apiserver.key" \
    --client-ca-file="$state/pki/ca.crt" \
    --token-auth-file="$state/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$state/pki/sa.pub" \
    --service-account-signing-key-file="$state/pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --audit-policy-file="$state/audit-policy.yaml" --audit-log-path="$state/audit.log" \
    --audit-log-format=json --audit-log-maxsize=200 --audit-log-maxbackup=3 \
    --allow-privileged=true --profiling=false \
    --endpoint-reconciler-type=none \
    --requestheader-client-ca-file="$state/pki/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$state/pki/front-proxy-client.crt" \
    --proxy-client-key-file="$state/pki/front-proxy-client.key"
}
