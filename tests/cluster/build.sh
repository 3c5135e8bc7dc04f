#!/usr/bin/env bash
# Builds the local control plane from the Go modules beside this script.
#
# Binaries go to a cache outside the repository, keyed by the contents of each
# part's go.mod, go.sum and wrapper sources, so a warm start builds nothing:
#   ${KITE_CLUSTER_CACHE:-~/.cache/kite/cluster}/<part>-<hash>/
# Prints the cache directory of every part, one "part=dir" per line, on stdout.
#
# KUBE_VERSION picks the Kubernetes release of the kube part: the newest supported one
# (tests/cluster/kube) by default, or an older supported minor, whose go.mod and go.sum
# are in tests/cluster/kube-<minor> (the wrappers in tests/cluster/kube are shared).
# It may name the minor (1.34) or the exact release that module pins (1.34.4).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${KITE_CLUSTER_CACHE:-$HOME/.cache/kite/cluster}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

# The release a kube module directory pins.
pinned() { sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([0-9.]*\)$/\1/p' "$1/go.mod" | head -n 1; }

newest=$(pinned "$here/kube")
wanted=${KUBE_VERSION:-$newest}
kube_mod=""
for dir in "$here/kube" "$here"/kube-1.*; do
  [ -f "$dir/go.mod" ] || continue
  release=$(pinned "$dir")
  if [ "$wanted" = "$release" ] || [ "$wanted" = "${release%.*}" ]; then kube_mod=$dir; fi
done
if [ -z "$kube_mod" ]; then
  supported=$(for dir in "$here/kube" "$here"/kube-1.*; do [ -f "$dir/go.mod" ] && pinned "$dir"; done | sort -V | tr '\n' ' ')
  echo "KUBE_VERSION=$wanted is not a supported release; supported: ${supported% }" >&2
  exit 2
fi
k8s_version=v$(pinned "$kube_mod")
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
version_ldflags() {
  local pkg out=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    out+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$out"
}

# The sources of PART: its directory, or for kube an older minor's go.mod and go.sum
# with the shared wrappers, assembled in the cache.
source_of() {
  if [ "$1" != kube ] || [ "$kube_mod" = "$here/kube" ]; then
    echo "$here/$1"
    return
  fi
  local src="$cache/src-kube-${k8s_version#v}"
  rm -rf "$src"; mkdir -p "$src"
  (cd "$here/kube" && find . -name '*.go' -exec cp --parents {} "$src/" \;)
  cp "$kube_mod/go.mod" "$kube_mod/go.sum" "$src/"
  echo "$src"
}

part_hash() {
  (cd "$1" && find . -name go.mod -o -name go.sum -o -name '*.go' | LC_ALL=C sort |
    xargs sha256sum; sha256sum "$here/build.sh" | cut -d' ' -f1; go version) |
    sha256sum | cut -c1-16
}

# build PART PKG... : builds each package of PART into its cache dir unless present.
build() {
  local part=$1; shift
  local src
  src=$(source_of "$part")
  local name=$part
  [ "$src" = "$here/$part" ] || name=$part-${k8s_version#v}
  local dir="$cache/$name-$(part_hash "$src")"
  if [ ! -f "$dir/.complete" ]; then
    echo "building $part into $dir (cold build: this takes a while)" >&2
    local tmp="$dir.tmp.$$"
    rm -rf "$tmp"; mkdir -p "$tmp"
    local start=$SECONDS
    (cd "$src" && go build -trimpath -ldflags "-s -w $(version_ldflags)" -o "$tmp/" "$@")
    [ "$part" != kwok ] || kwok_stages >"$tmp/stages.yaml"
    touch "$tmp/.complete"
    rm -rf "$dir"; mv "$tmp" "$dir"
    # Older builds of this part are unreachable now; keep the cache from growing.
    # (The hash is 16 characters: kube-<hash> is not kube-1.34.4-<hash>.)
    find "$cache" -maxdepth 1 -name "$name-????????????????" ! -path "$dir" -exec rm -rf {} +
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
