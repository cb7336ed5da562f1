#!/usr/bin/env bash
# box-qemu.sh — unpack a second emulator for the test box: QEMU 10.x from
# Debian's bookworm-backports, into smol's cache, beside the system's QEMU
# 7.2 (which stays the box's default and the benchmarks' peer). Then
#
#   SMOLBOX_QEMU=$(scripts/box-qemu.sh | tail -n1) bin/smolbox "…"
#
# runs a box on it, to see whether a failure follows the emulator.
#
# Why: the box is QEMU's software CPU emulating AMD SVM, and with 7.2 the
# box's own kernel and the guests nested in it die now and then in ways that
# point at that emulation (README, known issue): the box kernel's "TASK
# stack guard page" BUG, guests' page-fault loops at the return to the
# kernel, guests' triple faults. 10.0.2 was tried on 2026-12-07
# (BENCHMARKS.md, "The box on QEMU 10" and "Where the box kernel's stack
# guard page BUG starts"): it has the same GS-base crash, guests dying and
# a box deadlocked on a spinlock, so it is not the default.
#
# The packages are only unpacked (dpkg-deb -x), never installed. The
# libraries they link are the ones qemu-system-x86 7.2 pulls in
# (install-deps.sh installs it); a library still missing is reported by
# ldd and the script fails. The last line printed is the binary's path.
set -euo pipefail
cache="${XDG_CACHE_HOME:-$HOME/.cache}/smol/box-qemu"
mkdir -p "$cache"
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
printf 'deb http://deb.debian.org/debian bookworm-backports main\n' >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives"
	-o Debug::NoLocking=1 -o APT::Sandbox::User=root)

apt-get "${apt_opts[@]}" update -qq
version=$(apt-cache "${apt_opts[@]}" madison qemu-system-x86 | awk -F'|' '/bookworm-backports/ {gsub(/ /, "", $2); print $2; exit}')
if [ -z "$version" ]; then
	echo "box-qemu: bookworm-backports has no qemu-system-x86" >&2
	exit 1
fi
case "$version" in
1:1[0-9].* | 1:[2-9][0-9].*) ;;
*)
	echo "box-qemu: bookworm-backports has qemu-system-x86 $version, not 10 or later" >&2
	exit 1
	;;
esac
dir="$cache/${version//[:~+]/_}"
if [ ! -x "$dir/usr/bin/qemu-system-x86_64" ]; then
	echo "box-qemu: fetching QEMU $version from bookworm-backports"
	debs=$(mktemp -d)
	trap 'rm -rf "$debs"' EXIT
	(cd "$debs" && apt-get "${apt_opts[@]}" download -qq \
		"qemu-system-x86=$version" "qemu-system-data=$version" "qemu-system-common=$version")
	tmp="$dir.tmp"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	for d in "$debs"/*.deb; do
		dpkg-deb -x "$d" "$tmp"
	done
	# The microvm machine's default firmware; Debian's 7.2 ships it as a
	# link to qboot, its 10.x only as qboot.rom.
	[ -e "$tmp/usr/share/qemu/bios-microvm.bin" ] || ln -s qboot.rom "$tmp/usr/share/qemu/bios-microvm.bin"
	if ldd "$tmp/usr/bin/qemu-system-x86_64" | grep 'not found' >&2; then
		echo "box-qemu: QEMU $version needs the libraries above (apt-get install qemu-system-x86 brings them)" >&2
		exit 1
	fi
	rm -rf "$dir"
	mv "$tmp" "$dir"
fi
echo "box-qemu: $("$dir/usr/bin/qemu-system-x86_64" -L "$dir/usr/share/qemu" -version | head -1)"
echo "$dir/usr/bin/qemu-system-x86_64"
