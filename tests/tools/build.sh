#!/usr/bin/env bash
# Builds the Go tools the tests use to check config/ and the release workflow
# (promtool, actionlint), pinned by the go.mod beside each, into a cache outside the
# repository keyed by those files, so a warm run builds nothing:
#   ${KITE_TOOLS_CACHE:-~/.cache/kite/tools}/<tool>-<hash>/<tool>
# Usage: build.sh TOOL; prints the binary's path on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${KITE_TOOLS_CACHE:-$HOME/.cache/kite/tools}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

tool=${1:?usage: build.sh promtool|actionlint}
case $tool in
  promtool) pkg=github.com/prometheus/prometheus/cmd/promtool ;;
  actionlint) pkg=github.com/rhysd/actionlint/cmd/actionlint ;;
  *) echo "unknown tool $tool" >&2; exit 2 ;;
esac
hash=$( (cd "$here/$tool" && sha256sum go.mod go.sum tools.go; sha256sum "$here/build.sh" | cut -d' ' -f1; go version) |
  sha256sum | cut -c1-16)
dir="$cache/$tool-$hash"
if [ ! -f "$dir/.complete" ]; then
  echo "building $tool into $dir (cold build: this takes a while)" >&2
  tmp="$dir.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  start=$SECONDS
  (cd "$here/$tool" && go build -trimpath -ldflags "-s -w" -o "$tmp/$tool" "$pkg")
  touch "$tmp/.complete"
  rm -rf "$dir"; mv "$tmp" "$dir"
  find "$cache" -maxdepth 1 -name "$tool-*" ! -path "$dir" ! -name "*.tmp.*" -exec rm -rf {} +
  echo "built $tool in $((SECONDS - start)) s" >&2
fi
echo "$dir/$tool"
