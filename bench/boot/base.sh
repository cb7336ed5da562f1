#!/usr/bin/env bash
# base.sh COMMIT — build COMMIT's smol for `make bench-boot BASE=COMMIT`.
#
# The commit is checked out in a temporary git worktree outside the
# repository (under ${TMPDIR:-/tmp}, which the test box sees at the same
# path), its cmd/smol is built there, and the worktree is removed again.
# Prints the directory that holds the binary (DIR/smol); the caller removes
# it when the bench is done. Nothing in this checkout changes.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: base.sh COMMIT" >&2; exit 2; }
commit=$(git rev-parse --verify --quiet "$1^{commit}") || { echo "bench-boot: BASE=$1 is not a commit" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/smol-bench-base.XXXXXX")
tree=$dir/src
cleanup() {
	git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"
}
trap cleanup EXIT
git worktree add --detach --quiet "$tree" "$commit"
if ! (cd "$tree" && CGO_ENABLED=0 ${GO:-go} build -o "$dir/smol" ./cmd/smol) >&2; then
	echo "bench-boot: cannot build smol at $1 ($commit)" >&2
	rm -rf "$dir"
	exit 1
fi
echo "$dir"
