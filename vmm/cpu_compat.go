package vmm

import (
	"fmt"
	"strings"

	"github.com/smolvm/smol/kvm"
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
		return fmt.Errorf("it needs CPU features this host lacks (%s)", strings.Join(missing, ", "))
	}
	return nil
}
