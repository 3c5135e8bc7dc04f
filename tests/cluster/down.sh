#!/usr/bin/env bash
# Stops exactly the processes that up.sh started (by their recorded pids, never by
# name) and removes the cluster state.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${KITE_CLUSTER_DIR:-$repo/.cluster}

# Stop in reverse start order so that clients go before the servers they talk to.
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$state/pids/$name.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  # A recorded pid may have been reused by an unrelated process since; only signal
  # it if its command line still names our component.
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "/$name "; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    echo "stopped $name (pid $pid)"
  fi
done
rm -rf "$state"
