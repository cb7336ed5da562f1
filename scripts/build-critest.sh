#!/usr/bin/env bash
# Builds critest, the CRI validation suite of sigs.k8s.io/cri-tools, from
# the Go module proxy (it is not in Debian). critest is a Go test binary,
# so it is built with `go test -c` in a writable copy of the module.
# Usage: scripts/build-critest.sh OUT   (does nothing when OUT is current)
set -euo pipefail
version=v1.37.0
out=$(realpath -m "${1:-build/critest}")
stamp="$out.version"
if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$version" ]; then
	exit 0
fi
dir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cri-tools@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "build-critest: cannot download sigs.k8s.io/cri-tools@$version" >&2; exit 1; }
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$dir"/. "$src"
chmod -R u+w "$src"
echo "building critest $version (about 2 minutes the first time)" >&2
mkdir -p "$(dirname "$out")"
(cd "$src" && go test -c -o "$out" ./cmd/critest)
echo "$version" >"$stamp"
