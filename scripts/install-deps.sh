#!/usr/bin/env bash
# install-deps.sh — install what building and testing smol needs on a
# Debian 12 machine: the kernel build tools and source, QEMU (the test box and
# the benchmark peer; passt, the network benchmark's peer), a static busybox (tiny guest userlands), e2fsprogs
# (e2fsck and debugfs check the ext4 images imagefs writes), debootstrap (the
# integration tests' Debian image), and getcap and getfattr (libcap2-bin,
# attr: the integration tests read file capabilities and xattrs in a guest),
# containerd (the shim's tests start their own), the CNI plugins (make critest gives pods a bridge network), Chromium and ChromeDriver (the
# display's live view is tested in a real browser), virglrenderer and Mesa's EGL/GLES (make gpu builds the 3D
# helper against them; the 3D tests compile GL programs, one of them on GBM and KMS).
set -euo pipefail
pkgs=(make gcc flex bison bc libelf-dev libssl-dev cpio xz-utils linux-source-6.1 qemu-system-x86 busybox-static e2fsprogs debootstrap libcap2-bin attr passt containerd containernetworking-plugins chromium chromium-driver libvirglrenderer-dev libegl-dev libgles-dev libgbm-dev libdrm-dev libegl-mesa0 libgl1-mesa-dri)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all installed"
	exit 0
fi
sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
echo "deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
