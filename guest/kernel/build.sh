#!/usr/bin/env bash
# build.sh OUT FRAGMENT... — build a Linux 6.1 vmlinux (and bzImage) from the
# given config fragments merged over `make tinyconfig`, and copy it to OUT.
#
# Source, first found: a tarball named by SMOL_LINUX_TARBALL (its sha256 must
# equal SMOL_LINUX_SHA256); Debian's linux-source-6.1 package
# (/usr/src/linux-source-6.1.tar.xz); else the pinned kernel.org release
# below, downloaded once and verified by its sha256. The result is cached per machine under
# ${SMOL_CACHE:-~/.cache/smol}/kernel/<key>, where the key hashes the source,
# the fragments and the recipe version, so a second `make kernel` is a copy.
set -euo pipefail

out=$1; shift
[ $# -gt 0 ] || { echo "usage: build.sh OUT FRAGMENT..." >&2; exit 2; }

cache=${SMOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/smol}
pinned_url=https://cdn.kernel.org/pub/linux/kernel/v6.x/linux-6.1.20.tar.xz
pinned_sha256=76322de8c01a3c63b42c4d1e9b9e7d1897ddb91276e10d73d1f9df3562f031f0

verify() { # verify FILE SHA256
	local got
	got=$(sha256sum "$1" | cut -d' ' -f1)
	if [ "$got" != "$2" ]; then
		echo "kernel: $1 has sha256 $got, want ${2:-<unset SMOL_LINUX_SHA256>}" >&2
		return 1
	fi
}

if [ -n "${SMOL_LINUX_TARBALL:-}" ]; then
	tarball=$SMOL_LINUX_TARBALL
	[ -f "$tarball" ] || { echo "kernel: SMOL_LINUX_TARBALL=$tarball does not exist" >&2; exit 1; }
	verify "$tarball" "${SMOL_LINUX_SHA256:-}"
elif [ -f /usr/src/linux-source-6.1.tar.xz ]; then
	tarball=/usr/src/linux-source-6.1.tar.xz
else
	tarball=$cache/$(basename "$pinned_url")
	if [ ! -f "$tarball" ]; then
		echo "kernel: no linux-source-6.1 package; downloading $pinned_url"
		mkdir -p "$cache"
		if ! curl -fL --retry 3 -o "$tarball.part" "$pinned_url"; then
			echo "kernel: cannot download $pinned_url; install Debian's linux-source-6.1 or set SMOL_LINUX_TARBALL and SMOL_LINUX_SHA256" >&2
			rm -f "$tarball.part"; exit 1
		fi
		verify "$tarball.part" "$pinned_sha256" || { rm -f "$tarball.part"; exit 1; }
		mv "$tarball.part" "$tarball"
	fi
fi

# recipe names how this script turns source and fragments into a kernel;
# bump it when that changes (not for changes in how the source is found).
recipe=2
# Source patches, applied to every kernel built here (each leaves a kernel
# whose config does not need it unchanged).
patches=("$(cd "$(dirname "$0")" && pwd)"/*.patch)
src_id=$(stat -c '%s-%Y' "$tarball")
key=$( { echo "$src_id recipe=$recipe"; cat "${patches[@]}" "$@"; } | sha256sum | cut -c1-16)
dir=$cache/kernel/$key
mkdir -p "$(dirname "$out")"
if [ -f "$dir/vmlinux" ] && [ -f "$dir/bzImage" ]; then
	cp "$dir/vmlinux" "$out"
	cp "$dir/bzImage" "$(dirname "$out")/$(basename "$out" | sed 's/vmlinux/bzImage/')"
	echo "kernel: $out (cached, $dir)"
	exit 0
fi

srcdir=$cache/src/$src_id
if [ ! -f "$srcdir/.unpacked" ]; then
	echo "kernel: unpacking $tarball"
	rm -rf "$srcdir"; mkdir -p "$srcdir"
	tar -xf "$tarball" -C "$srcdir" --strip-components=1
	touch "$srcdir/.unpacked"
fi
for p in "${patches[@]}"; do
	mark=$srcdir/.patched-$(sha256sum "$p" | cut -c1-16)
	[ -f "$mark" ] && continue
	echo "kernel: applying $(basename "$p")"
	patch -d "$srcdir" -p1 --forward --quiet <"$p" || { echo "kernel: $p does not apply" >&2; exit 1; }
	touch "$mark"
done

rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
log=$dir.tmp/build.log
echo "kernel: configuring ($*), log in $log"
make -C "$srcdir" O="$dir.tmp" tinyconfig >"$log" 2>&1
"$srcdir/scripts/kconfig/merge_config.sh" -m -O "$dir.tmp" "$dir.tmp/.config" "$@" >>"$log" 2>&1
make -C "$srcdir" O="$dir.tmp" olddefconfig >>"$log" 2>&1

# Every option a fragment asks for must survive olddefconfig: a silently
# dropped option (an unmet dependency) is a build bug, not a surprise at boot.
missing=0
for frag in "$@"; do
	while IFS= read -r line; do
		case "$line" in CONFIG_*=*) ;; *) continue ;; esac
		opt=${line%%=*}; val=${line#*=}
		if [ "$val" = n ]; then
			if grep -q "^$opt=[ym]" "$dir.tmp/.config"; then echo "kernel: $opt is set, want n" >&2; missing=1; fi
		elif ! grep -qx "$opt=$val" "$dir.tmp/.config"; then
			echo "kernel: $opt=$val did not stick ($(grep "^$opt=\|^# $opt " "$dir.tmp/.config" || echo unset))" >&2; missing=1
		fi
	done <"$frag"
done
[ $missing = 0 ] || { echo "kernel: fix the fragment (see $dir.tmp/.config)" >&2; exit 1; }

echo "kernel: building vmlinux and bzImage with $(nproc) jobs (a few minutes)"
start=$(date +%s)
if ! make -C "$srcdir" O="$dir.tmp" -j"$(nproc)" vmlinux bzImage >>"$log" 2>&1; then
	tail -40 "$log" >&2
	echo "kernel: build failed, full log in $log" >&2
	exit 1
fi
mkdir -p "$dir"
cp "$dir.tmp/vmlinux" "$dir.tmp/.config" "$dir/"
cp "$dir.tmp/arch/x86/boot/bzImage" "$dir/bzImage"
rm -rf "$dir.tmp"
cp "$dir/vmlinux" "$out"
cp "$dir/bzImage" "$(dirname "$out")/$(basename "$out" | sed 's/vmlinux/bzImage/')"
echo "kernel: $out built in $(( $(date +%s) - start ))s"
