#!/usr/bin/env bash
# hwkvm.sh: the figures that need hardware KVM, in one bounded run, on a
# machine where nothing can be installed (the device machine a session is
# sometimes lent, or any host whose /dev/kvm has VMX or SVM behind it).
#
# Here, first: `make hwkvm-bundle` writes build/hwkvm.tar.xz (smol, the
# guest kernel, init and agent, the boot and fork benches, and the KVM,
# VMM and snapshot test binaries). There, from the repository root:
#
#	tar -xJf build/hwkvm.tar.xz && scripts/hwkvm.sh OUTDIR
#
# It prints, and writes to OUTDIR/hwkvm.log: what the host's KVM is (a
# PVM /dev/kvm, which cannot boot Linux, still runs the tiny-guest parts),
# N boots to init with smol's --boot-time view, the boot bench's medians
# and the VMM's memory for smol alone (QEMU is not there to compare with:
# these are absolute figures, for BENCHMARKS.md beside the box's ratios),
# the fork/restore bench, and the test binaries. Every step has a time
# limit, so the whole run stays inside one call of a few minutes
# (HWKVM_BOOTS, default 30, sets N).
set -u
out=${1:-/tmp/hwkvm}
mkdir -p "$out"
exec > >(tee "$out/hwkvm.log") 2>&1
boots=${HWKVM_BOOTS:-30}
step() { echo; echo "=== $* ($(date -u +%T))"; }

step "host"
uname -a
grep -m1 'model name' /proc/cpuinfo
echo "cpus: $(nproc); memory: $(awk '/MemTotal/{print $2/1024 " MiB"}' /proc/meminfo)"
echo "virtualization flags: $(grep -o -w -E 'vmx|svm' /proc/cpuinfo | sort | uniq -c | tr '\n' ' ')(none shown is normal in a nested VM)"
ls -l /dev/kvm
echo "kvm modules: $(ls -d /sys/module/kvm* 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
for p in /sys/module/kvm_intel/parameters/nested /sys/module/kvm_amd/parameters/nested; do
	[ -e "$p" ] && echo "$p: $(cat "$p")"
done

linux=no
step "one boot of the demo guest"
if timeout 60 bin/smol run --boot-time --initrd build/initramfs.cpio; then
	linux=yes
else
	echo "hwkvm: smol could not boot Linux here (status $?): only the tiny-guest parts follow"
fi

if [ $linux = yes ]; then
	step "$boots boots to init (bin/smol run --boot-time, 1 vCPU, default devices)"
	for i in $(seq "$boots"); do
		timeout 30 bin/smol run --boot-time --initrd build/initramfs.cpio 2>&1 >/dev/null | grep '^boot-time:'
	done | tee "$out/boot-times.txt"
	awk '{gsub("ms,?","");} {f[NR]=$4; u[NR]=$6} END {n=asort(f); asort(u); if (n) printf "median of %d: first KVM_RUN %s ms, userspace %s ms\n", n, f[int((n+1)/2)], u[int((n+1)/2)]}' "$out/boot-times.txt"

	step "boot bench, smol alone (bench-boot -only smol,smol-bare)"
	timeout 120 bin/bench-boot -n 15 -only smol,smol-bare -settle-mib 0 -commit "$(cat build/hwkvm-commit 2>/dev/null)" || echo "hwkvm: bench-boot ended with status $?"

	step "integration tests that boot guests, directly on this KVM"
	(cd integration && timeout 150 ../build/hwkvm/integration.test -test.v -test.timeout 140s \
		-test.run '^(TestBootTimeReportsBothMilestones|TestMachineLifecycle|TestMachineFork|TestMachineSnapshotRestore|TestVolumeBothWays)$' \
		>"$out/integration.log" 2>&1; echo "integration tests: status $?")
	grep -E '^(--- |ok|PASS|FAIL)|KNOWN ISSUE' "$out/integration.log" | head -40
fi

step "fork and restore, VMM side (bench-fork; a tiny guest, any KVM)"
SMOL_ALLOW_PVM=1 timeout 120 bin/bench-fork -n 10 -sizes 256M,1G,4G -disk-data 256 || echo "hwkvm: bench-fork ended with status $?"

step "KVM, VMM and snapshot tests"
for t in kvm vmm snapshot; do
	(cd "$t" && SMOL_ALLOW_PVM=1 timeout 60 "../build/hwkvm/$t.test" -test.short -test.timeout 55s 2>&1 | tail -5) || true
done
step "done"
