package vmm

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/snapshot"
)

// featureRegisters are the CPUID registers that tell a guest which
// instructions and state it may use. A snapshot's guest was told what its
// host offered; restored where any of those bits is missing it would
// fault (or corrupt state) on the first such instruction, so the restore
// is refused instead. dynamic bits reflect the guest's own settings (CR4),
// not the host's.
var featureRegisters = []struct {
	function, index uint32
	reg             string
	dynamic         uint32
}{
	{0x1, 0, "ECX", 1<<27 | 1<<31}, // OSXSAVE follows CR4; HYPERVISOR is the VMM's
	{0x1, 0, "EDX", 0},
	{0x7, 0, "EBX", 0},
	{0x7, 0, "ECX", 1 << 4}, // OSPKE follows CR4
	{0x7, 0, "EDX", 0},
	{0x7, 1, "EAX", 0},
	{0xd, 0, "EAX", 0}, // XSAVE components (XCR0)
	{0xd, 1, "EAX", 0},
	{0x80000001, 0, "ECX", 0},
	{0x80000001, 0, "EDX", 0},
}

// missingFeatures lists the feature bits the saved guest CPUID has that
// host, the CPUID a vCPU made on this host has, lacks.
func missingFeatures(saved, host []kvm.CPUIDEntry) []string {
	var missing []string
	for _, r := range featureRegisters {
		s, ok := entry(saved, r.function, r.index)
		if !ok {
			continue
		}
		h, _ := entry(host, r.function, r.index)
		if lack := register(s, r.reg) &^ register(h, r.reg) &^ r.dynamic; lack != 0 {
			missing = append(missing, fmt.Sprintf("CPUID %#x.%d %s %#x", r.function, r.index, r.reg, lack))
		}
	}
	return missing
}

func entry(entries []kvm.CPUIDEntry, function, index uint32) (kvm.CPUIDEntry, bool) {
	for _, e := range entries {
		if e.Function == function && e.Index == index {
			return e, true
		}
	}
	return kvm.CPUIDEntry{}, false
}

func register(e kvm.CPUIDEntry, reg string) uint32 {
	switch reg {
	case "EAX":
		return e.EAX
	case "EBX":
		return e.EBX
	case "ECX":
		return e.ECX
	}
	return e.EDX
}

// checkHostFeatures refuses a snapshot whose guest uses CPU features this
// host does not have, naming them. host is what a vCPU New just made here
// reads back (KVM_GET_CPUID2): on some hypervisors (PVM) that is more than
// what was set, and it is what a guest of this host is really offered.
func checkHostFeatures(saved, host []kvm.CPUIDEntry) error {
	if missing := missingFeatures(saved, host); len(missing) > 0 {
		return &HostCPUError{fmt.Sprintf("it needs CPU features this host lacks (%s)", strings.Join(missing, ", "))}
	}
	return nil
}

// HostCPUError is a snapshot whose guest this host's CPU cannot run:
// another vendor, or features the guest was given that this host lacks.
// A caller with another way to start the machine (a cold boot of its
// disks) falls back on it for this error only.
type HostCPUError struct{ Reason string }

func (e *HostCPUError) Error() string { return e.Reason }

// CheckRestoreHost tells, before anything is built, whether this host can
// resume the snapshot at path: the same architecture and CPU vendor, and
// every CPU feature its guest was given (a *HostCPUError if not). It
// makes a throwaway VM with one vCPU to read what a guest here is
// offered.
func CheckRestoreHost(path string) error {
	r, err := snapshot.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	var host HostState
	var v VCPUState
	if err := r.Section("host", hostSectionVersion, &host); err != nil {
		return err
	}
	if err := r.Section("vcpu.0", vcpuSectionVersion, &v); err != nil {
		return err
	}
	if host.Arch != runtime.GOARCH {
		return &HostCPUError{fmt.Sprintf("the snapshot was taken on %s, this host is %s", host.Arch, runtime.GOARCH)}
	}
	sys, err := kvm.Open()
	if err != nil {
		return err
	}
	defer sys.Close()
	supported, err := supportedCPUID(sys)
	if err != nil {
		return err
	}
	if saved, here := cpuVendor(v), cpuVendor(VCPUState{CPUID: supported.Entries}); saved != here {
		return &HostCPUError{fmt.Sprintf("the snapshot was taken on a %s CPU, this host's is %s", saved, here)}
	}
	fresh, err := offeredCPUID(sys, supported)
	if err != nil {
		return err
	}
	return checkHostFeatures(v.CPUID, fresh)
}

// offeredCPUID is what a guest of this host is offered: the CPUID a
// throwaway vCPU reads back after smol set its own (KVM_GET_CPUID2).
func offeredCPUID(sys *kvm.System, supported *kvm.CPUID) ([]kvm.CPUIDEntry, error) {
	vm, err := sys.CreateVM()
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	fd, err := vm.CreateVCPU(0)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	if err := fd.SetCPUID(guestCPUID(supported, 0, 1)); err != nil {
		return nil, err
	}
	c, err := fd.CPUID()
	if err != nil {
		return nil, err
	}
	return c.Entries, nil
}
