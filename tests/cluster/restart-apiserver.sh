#!/usr/bin/env bash
# Stops the running kube-apiserver of the local cluster (SIGKILL, as a crash would) and
# starts it again with the same state, then waits until it is ready. For tests of
# watch recovery; the other components reconnect by themselves.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${KITE_CLUSTER_DIR:-$repo/.cluster}
# shellcheck source=lib.sh
. "$here/lib.sh"

pid=$(cat "$state/pids/kube-apiserver.pid")
if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "/kube-apiserver "; then
  kill -KILL "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
fi
kube_dir=$("$here/build.sh" kube | sed -n 's/^kube=//p')
# Keep the old log: it is appended to, not replaced.
mv "$state/logs/kube-apiserver.log" "$state/logs/kube-apiserver.log.$(date +%s)"
start_apiserver "$kube_dir"
wait_for "kube-apiserver /readyz" curl -sf --cacert "$state/pki/ca.crt" \
  -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/readyz"
echo "kube-apiserver restarted"
