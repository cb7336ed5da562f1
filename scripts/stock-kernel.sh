#!/usr/bin/env bash
# stock-kernel.sh OUT — fetch Debian's stock cloud kernel (a distribution
# bzImage, as users run it) with apt and copy its vmlinuz to OUT. Tests boot
# it to prove smol is not tied to the project's own kernel.
set -euo pipefail
out=$1
cache=${SMOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/smol}/stock-kernel
pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
if [ -z "$pkg" ]; then
	sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
fi
[ -n "$pkg" ] || { echo "stock-kernel: apt knows no linux-image-cloud-amd64" >&2; exit 1; }
mkdir -p "$cache" "$(dirname "$out")"
if ! ls "$cache/$pkg"/boot/vmlinuz-* >/dev/null 2>&1; then
	echo "stock-kernel: downloading $pkg"
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download "$pkg" >/dev/null)
	rm -rf "$cache/$pkg.tmp"
	dpkg-deb -x "$tmp"/*.deb "$cache/$pkg.tmp"
	rm -rf "$tmp" "$cache/$pkg"
	mv "$cache/$pkg.tmp" "$cache/$pkg"
fi
cp "$cache/$pkg"/boot/vmlinuz-* "$out"
echo "stock-kernel: $out ($pkg)"
