#!/usr/bin/env bash
# Builds the local control plane from the Go modules beside this script.
#
# Binaries go to a cache outside the repository, keyed by the contents of each
# part's go.mod, go.sum and wrapper sources, so a warm start builds nothing:
#   ${KITE_CLUSTER_CACHE:-~/.cache/kite/cluster}/<part>-<hash>/
# Prints the cache directory of every part, one "part=dir" per line, on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${KITE_CLUSTER_CACHE:-$HOME/.cache/kite/cluster}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

k8s_version=v1.37.2
version_ldflags() {
  local pkg out=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
    out+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$out"
}

part_hash() {
  (cd "$here/$1" && find . -name go.mod -o -name go.sum -o -name '*.go' | LC_ALL=C sort |
    xargs sha256sum; sha256sum "$here/build.sh" | cut -d' ' -f1; go version) |
    sha256sum | cut -c1-16
}

# build PART PKG... : builds each package of PART into its cache dir unless present.
build() {
  local part=$1; shift
  local dir="$cache/$part-$(part_hash "$part")"
  if [ ! -f "$dir/.complete" ]; then
    echo "building $part into $dir (cold build: this takes a while)" >&2
    local tmp="$dir.tmp.$$"
    rm -rf "$tmp"; mkdir -p "$tmp"
    local start=$SECONDS
    (cd "$here/$part" && go build -trimpath -ldflags "-s -w $(version_ldflags)" -o "$tmp/" "$@")
    [ "$part" != kwok ] || kwok_stages >"$tmp/stages.yaml"
    touch "$tmp/.complete"
    rm -rf "$dir"; mv "$tmp" "$dir"
    # Older builds of this part are unreachable now; keep the cache from growing.
    find "$cache" -maxdepth 1 -name "$part-*" ! -path "$dir" ! -name "*.tmp.*" -exec rm -rf {} +
    echo "built $part in $((SECONDS - start)) s" >&2
  fi
  echo "$part=$dir"
}

# kwok's own default "fast" stages (nodes Ready with lease heartbeats, pods Running and
# Ready at once), rendered from the pinned kwok module rather than copied into this repo.
kwok_stages() {
  kubectl kustomize "$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage/fast"
}

parts=${*:-etcd kwok kube}
for part in $parts; do
  case $part in
    etcd) build etcd ./etcd ;;
    kwok) build kwok sigs.k8s.io/kwok/cmd/kwok ;;
    kube) build kube ./kube-apiserver ./kube-controller-manager ./kube-scheduler ;;
    *) echo "unknown part: $part" >&2; exit 2 ;;
  esac
done
