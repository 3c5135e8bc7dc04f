#!/usr/bin/env bash
# `make demo`: the seed's walkthrough against the local cluster. Runs the max-replicas
# controller, creates a drifted and labelled deployment, shows it corrected with its
# event and the health probe, then cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBECONFIG=$PWD/.cluster/kubeconfig
kite=${KITE:-target/debug/kite}
ns=kite-demo

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
wait_until() { # wait_until SECONDS CMD...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "timed out waiting for: $*" >&2; return 1; }
    sleep 0.2
  done
}

kubectl delete namespace $ns --ignore-not-found --wait=true >/dev/null
kubectl create namespace $ns >/dev/null
log=$(mktemp)
step "kite run examples/max-replicas-controller.star --allow-all &"
"$kite" run examples/max-replicas-controller.star --allow-all >"$log" 2>"$log.err" &
pid=$!
cleanup() {
  kill -TERM $pid 2>/dev/null && wait $pid 2>/dev/null || true
  kubectl delete namespace $ns --wait=false >/dev/null 2>&1 || true
  rm -f "$log" "$log.err"
}
trap cleanup EXIT
wait_until 30 curl -sf localhost:8081/readyz
cat "$log"

step "kubectl create deployment alice-web --image=nginx:alpine --replicas=10 -n $ns"
kubectl create deployment alice-web --image=nginx:alpine --replicas=10 -n $ns
step "kubectl label deployment alice-web enforce-max-replicas=true -n $ns"
kubectl label deployment alice-web enforce-max-replicas=true -n $ns
wait_until 30 test "$(kubectl get deployment alice-web -n $ns -o jsonpath='{.spec.replicas}')" = 3
wait_until 60 kubectl rollout status deployment/alice-web -n $ns --timeout=5s

step "kubectl get deployment alice-web -n $ns"
kubectl get deployment alice-web -n $ns
step "kubectl get events -n $ns --field-selector involvedObject.name=alice-web"
kubectl get events -n $ns --field-selector involvedObject.name=alice-web
step "curl -i http://localhost:8081/healthz"
curl -si http://localhost:8081/healthz; echo
printf '\n\033[1mcontroller output:\033[0m\n'
cat "$log"
