package vmm

import (
	"math/bits"

	"github.com/smolvm/smol/kvm"
)

// CPUID bits the VMM edits. Names follow the Intel SDM / AMD APM.
const (
	cpuid1ECXHypervisor = 1 << 31 // "running under a hypervisor": Linux then trusts the 0x4000_0000 leaves
	cpuid1EDXHTT        = 1 << 28 // more than one logical processor per package
	cpuid6EAXAllBits    = 0       // leaf 6 (thermal/power) is host power management: hidden

	cpuidExtCmpLegacy = 1 << 1 // 0x8000_0001 ECX: core multi-processing legacy mode (AMD)
)

// guestCPUID derives vCPU index's CPUID from the set KVM supports: KVM has
// already removed what it cannot virtualise, so the VMM only describes the
// machine's shape (N vCPUs in one package, one thread per core, APIC ID =
// vCPU index) and hides host-only leaves.
func guestCPUID(supported *kvm.CPUID, index, count int) *kvm.CPUID {
	out := &kvm.CPUID{Entries: make([]kvm.CPUIDEntry, 0, len(supported.Entries))}
	apicID := uint32(index)
	// Bits of APIC ID that number cores within the package.
	coreBits := uint32(bits.Len(uint(count - 1)))
	for _, e := range supported.Entries {
		switch e.Function {
		case 0x1:
			e.ECX |= cpuid1ECXHypervisor
			// EBX[31:24] initial APIC ID, EBX[23:16] logical processors per package.
			e.EBX = e.EBX&0x0000ffff | apicID<<24 | uint32(min(count, 255))<<16
			if count > 1 {
				e.EDX |= cpuid1EDXHTT
			} else {
				e.EDX &^= cpuid1EDXHTT
			}
		case 0x4:
			// Deterministic cache parameters: EAX[31:26] is cores per package - 1;
			// EAX[25:14] is logical processors sharing this cache - 1 (each core has
			// its own L1/L2; the last level is shared by the package).
			if e.EAX&0x1f == 0 { // no cache at this sub-leaf
				break
			}
			e.EAX &= 0x3fff
			e.EAX |= uint32(count-1) << 26
			if level := (e.EAX >> 5) & 0x7; level >= 3 {
				e.EAX |= uint32(count-1) << 14
			}
		case 0x6:
			e.EAX, e.EBX, e.ECX, e.EDX = cpuid6EAXAllBits, 0, 0, 0
		case 0xb, 0x1f:
			// Extended topology: sub-leaf 0 is the SMT level (one thread per
			// core), sub-leaf 1 the core level; EDX is the x2APIC ID.
			switch e.Index {
			case 0:
				e.EAX, e.EBX, e.ECX = 0, 1, 1<<8|0
			case 1:
				e.EAX, e.EBX, e.ECX = coreBits, uint32(count), 2<<8|1
			default:
				e.EAX, e.EBX, e.ECX = 0, 0, e.Index
			}
			e.EDX = apicID
		case 0x8000_0001:
			if count > 1 {
				e.ECX |= cpuidExtCmpLegacy
			} else {
				e.ECX &^= cpuidExtCmpLegacy
			}
		case 0x8000_0008:
			// AMD: ECX[15:12] APIC ID bits for cores, ECX[7:0] cores - 1.
			e.ECX = e.ECX&^0xf0ff | coreBits<<12 | uint32(count-1)
		case 0x8000_001e:
			// AMD extended APIC ID; one thread per core, one node.
			e.EAX, e.EBX, e.ECX = apicID, apicID, 0
		}
		out.Entries = append(out.Entries, e)
	}
	return out
}
