package vmm

import (
	"math/bits"
	"unsafe"

	"github.com/smolvm/smol/kvm"
)

// CPUID bits the VMM edits. Names follow the Intel SDM / AMD APM.
const (
	cpuid1ECXHypervisor  = 1 << 31 // "running under a hypervisor": Linux then trusts the 0x4000_0000 leaves
	cpuid1ECXTSCDeadline = 1 << 24 // the local APIC timer's TSC-deadline mode
	cpuid1EDXHTT         = 1 << 28 // more than one logical processor per package
	cpuid6EAXAllBits     = 0       // leaf 6 (thermal/power) is host power management: hidden

	cpuidExtCmpLegacy = 1 << 1 // 0x8000_0001 ECX: core multi-processing legacy mode (AMD)

	// AMX enumeration outside leaf 0xd.
	cpuid7EDXAMXBF16     = 1 << 22 // leaf 7.0 EDX
	cpuid7EDXAMXTile     = 1 << 24 // leaf 7.0 EDX
	cpuid7EDXAMXInt8     = 1 << 25 // leaf 7.0 EDX
	cpuid7s1EAXAMXFP16   = 1 << 21 // leaf 7.1 EAX
	cpuid7s1EDXAMXComplx = 1 << 8  // leaf 7.1 EDX
	cpuidLeafAMXTile     = 0x1d    // tile palettes
	cpuidLeafAMXTMUL     = 0x1e    // tile multiplier (TMUL), and in sub-leaf 1 the later AMX extensions

	// Leaf 0xd, processor extended state enumeration (SDM vol. 1, 13.2).
	cpuidLeafXSave        = 0xd
	cpuidDs1EAXXSaveC     = 1 << 1 // 0xd.1 EAX: XSAVEC (compacted format)
	cpuidDs1EAXXSaveS     = 1 << 3 // 0xd.1 EAX: XSAVES/XRSTORS and IA32_XSS
	cpuidDs1EAXXFD        = 1 << 4 // 0xd.1 EAX: extended feature disable (IA32_XFD)
	cpuidDCompSupervisor  = 1 << 0 // 0xd.i ECX: component i is an IA32_XSS (supervisor) component
	cpuidDCompAlign64     = 1 << 1 // 0xd.i ECX: component i is 64-byte aligned in the compacted format
	cpuidDCompXFD         = 1 << 2 // 0xd.i ECX: XFD can disable component i (state KVM enables on demand)
	xsaveLegacyComponents = 1<<0 | 1<<1
	xsaveLegacyAreaSize   = 512 + 64 // legacy region (x87, SSE) and the XSAVE header
	xfeatureXTileCfg      = 1 << 17
	xfeatureXTileData     = 1 << 18
	xfeatureXTile         = xfeatureXTileCfg | xfeatureXTileData

	// guestXSaveLimit is how much XSAVE state the VMM can read from and
	// write back to a vCPU: struct kvm_xsave, the buffer of KVM_GET_XSAVE
	// and KVM_SET_XSAVE, in the standard (non-compacted) format.
	guestXSaveLimit = uint32(unsafe.Sizeof(kvm.XSave{}))
)

// supportedCPUID is what KVM can give a guest: KVM_GET_SUPPORTED_CPUID,
// plus the TSC-deadline timer where KVM emulates it. KVM reports that one
// feature through a capability (KVM_CAP_TSC_DEADLINE_TIMER) instead of in
// its supported CPUID, as its API documentation says, so a VMM that only
// copies the supported set gives its guests none. Without it Linux runs
// the local APIC timer in one-shot mode: it calibrates the timer against
// another clock at boot and arms it through the initial-count register,
// where QEMU's, Firecracker's and cloud-hypervisor's guests write one
// deadline MSR. (Found comparing a smol guest's /proc/cpuinfo with a QEMU
// microvm guest's in the test box.)
func supportedCPUID(sys *kvm.System) (*kvm.CPUID, error) {
	c, err := sys.SupportedCPUID()
	if err != nil {
		return nil, err
	}
	if n, err := sys.CheckExtension(kvm.CapTSCDeadlineTimer); err == nil && n > 0 {
		for i := range c.Entries {
			if c.Entries[i].Function == 0x1 {
				c.Entries[i].ECX |= cpuid1ECXTSCDeadline
			}
		}
	}
	return c, nil
}

// guestCPUID derives vCPU index's CPUID from the set KVM supports: KVM has
// already removed what it cannot virtualise, so the VMM only describes the
// machine's shape (N vCPUs in one package, one thread per core, APIC ID =
// vCPU index), hides host-only leaves, and hides XSAVE state it cannot save
// (see guestXSave).
func guestCPUID(supported *kvm.CPUID, index, count int) *kvm.CPUID {
	out := &kvm.CPUID{Entries: make([]kvm.CPUIDEntry, 0, len(supported.Entries))}
	apicID := uint32(index)
	// Bits of APIC ID that number cores within the package.
	coreBits := uint32(bits.Len(uint(count - 1)))
	xs := guestXSave(supported)
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
		case 0x7:
			if !xs.amx() {
				switch e.Index {
				case 0:
					e.EDX &^= cpuid7EDXAMXBF16 | cpuid7EDXAMXTile | cpuid7EDXAMXInt8
				case 1:
					e.EAX &^= cpuid7s1EAXAMXFP16
					e.EDX &^= cpuid7s1EDXAMXComplx
				}
			}
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
		case cpuidLeafXSave:
			if !xs.edit(&e) {
				continue
			}
		case cpuidLeafAMXTile, cpuidLeafAMXTMUL:
			// Without tile state these leaves describe nothing; an absent
			// leaf below the maximum reads as zeroes (no palettes).
			if !xs.amx() {
				continue
			}
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

// xsaveLayout is the XSAVE state a guest is given: which components it may
// enable and where KVM says each one lives.
//
// The choice: the guest gets only the state components whose contents the
// VMM can read back with KVM_GET_XSAVE, that is, that lie inside struct
// kvm_xsave's 4096 bytes and that KVM holds all the time. Everything else,
// today AMX (XTILECFG, component 17, and XTILEDATA, component 18, 8 KiB per
// vCPU at offset 2816), is hidden from the guest altogether: its component
// bits and sub-leaves in leaf 0xd, its feature bits in leaf 7 and its
// leaves 0x1d and 0x1e. The alternative, asking for AMX with arch_prctl
// (ARCH_REQ_XCOMP_GUEST_PERM) and saving state with KVM_GET_XSAVE2 at the
// size KVM_CAP_XSAVE2 reports, was rejected because:
//
//   - KVM_GET_XSAVE silently truncates what does not fit in 4096 bytes, so
//     one forgotten call site would lose a guest's tile registers without
//     an error; a guest that cannot enable AMX has none to lose.
//   - Every vCPU's saved state would grow from under 4 KiB to about 11 KiB,
//     for a feature microVM workloads hardly use.
//   - The permission is process-wide and cannot be dropped again, and a
//     guest told about AMX cannot be restored on a host without it, so the
//     guest's CPU would depend on which host and which process made it.
//
// Without that permission the supported set KVM reports is itself
// inconsistent: KVM leaves AMX out of leaf 0xd (it filters XCR0 by the
// process's permission, and refuses KVM_SET_CPUID2 with EPERM if 0xd lists
// XTILEDATA anyway), but it still sets the leaf 7 AMX bits and reports
// leaves 0x1d/0x1e, which KVM_SET_CPUID2 then drops on some hosts (an
// Intel Xeon with host kernel 6.18). A guest told it has AMX-TILE but no
// tile palette and no XCR0 bit for the tiles is a CPU that does not exist.
// (A PVM guest, which runs CPUID natively unless PVM intercepts it, may
// still read the host's leaf 7 bits; it cannot enable tile state either,
// since XSETBV traps and KVM limits XCR0 to the components of leaf 0xd.)
//
// The rule is written for components rather than for AMX alone, so that a
// later dynamically enabled component (XFD-capable, ECX bit 2 of its 0xd
// sub-leaf) or one beyond 4096 bytes is hidden the same way without a
// change here. Supervisor (IA32_XSS) components, CET's for one, are kept:
// they are not part of KVM_GET_XSAVE's standard-format area at all; their
// contents travel as MSRs (KVM_GET_MSRS).
type xsaveLayout struct {
	user       uint64                    // XCR0 components kept (0xd.0 EDX:EAX)
	supervisor uint64                    // IA32_XSS components (0xd.1 EDX:ECX), as KVM reports them
	subleaves  map[uint32]kvm.CPUIDEntry // 0xd.i for the components above, i >= 2
}

// guestXSave chooses the guest's XSAVE components from KVM's supported set.
func guestXSave(supported *kvm.CPUID) xsaveLayout {
	xs := xsaveLayout{subleaves: map[uint32]kvm.CPUIDEntry{}}
	leaf0 := findExact(supported, cpuidLeafXSave, 0)
	if leaf0 == nil {
		return xs // no XSAVE at all
	}
	offered := uint64(leaf0.EAX) | uint64(leaf0.EDX)<<32
	xs.user = offered & xsaveLegacyComponents
	for i := uint32(2); i < 64; i++ {
		if offered&(1<<i) == 0 {
			continue
		}
		sub := findExact(supported, cpuidLeafXSave, i)
		switch {
		case sub == nil || sub.EAX == 0:
			// Size and offset unknown: nothing to check it against.
		case sub.ECX&cpuidDCompSupervisor != 0:
			// A supervisor component listed as an XCR0 one: KVM never
			// reports that, and a sub-leaf that does is not to be trusted.
		case sub.ECX&cpuidDCompXFD != 0:
			// Dynamic state: KVM grows the guest FPU for it only once
			// the process has the arch_prctl guest permission.
		case uint64(sub.EBX)+uint64(sub.EAX) > uint64(guestXSaveLimit):
			// Beyond what KVM_GET_XSAVE carries.
		default:
			xs.user |= 1 << i
			xs.subleaves[i] = *sub
		}
	}
	// XCR0[17] and XCR0[18] can only be set together (SDM vol. 1, 13.3):
	// tile configuration without tile data is not a valid guest.
	if xs.user&xfeatureXTile != xfeatureXTile {
		xs.user &^= xfeatureXTile
		delete(xs.subleaves, uint32(bits.TrailingZeros64(xfeatureXTileCfg)))
	}
	if leaf1 := findExact(supported, cpuidLeafXSave, 1); leaf1 != nil {
		xs.supervisor = uint64(leaf1.ECX) | uint64(leaf1.EDX)<<32
		for i := uint32(0); i < 64; i++ {
			if xs.supervisor&(1<<i) == 0 {
				continue
			}
			if sub := findExact(supported, cpuidLeafXSave, i); sub != nil {
				xs.subleaves[i] = *sub
			}
		}
	}
	return xs
}

// amx reports whether the guest keeps the AMX tile state, without which
// its AMX feature bits and leaves must go.
func (xs xsaveLayout) amx() bool { return xs.user&xfeatureXTile == xfeatureXTile }

// edit rewrites one leaf 0xd entry for the kept components and reports
// whether the entry stays at all.
func (xs xsaveLayout) edit(e *kvm.CPUIDEntry) bool {
	switch e.Index {
	case 0:
		e.EAX, e.EDX = uint32(xs.user), uint32(xs.user>>32)
		// ECX: the area every component the guest may enable needs.
		// EBX: the area XCR0's current components need; KVM rewrites it
		// whenever the guest sets XCR0, and reports it equal to ECX in
		// the supported set, as here.
		e.ECX = xs.standardSize()
		e.EBX = e.ECX
	case 1:
		if e.EAX&(cpuidDs1EAXXSaveC|cpuidDs1EAXXSaveS) != 0 {
			e.EBX = xs.compactedSize()
		} else {
			e.EBX = 0
		}
		if !xs.anyXFD() {
			// XFD exists to enable dynamic components, and none is left.
			e.EAX &^= cpuidDs1EAXXFD
		}
	default:
		if e.Index >= 64 || (xs.user|xs.supervisor)&(1<<e.Index) == 0 {
			return false
		}
	}
	return true
}

// standardSize is the size of an XSAVE area, standard format, holding every
// kept XCR0 component: the legacy area and header, then each component at
// its fixed offset.
func (xs xsaveLayout) standardSize() uint32 {
	size := uint32(xsaveLegacyAreaSize)
	for i, sub := range xs.subleaves {
		if xs.user&(1<<i) != 0 {
			size = max(size, sub.EBX+sub.EAX)
		}
	}
	return size
}

// compactedSize is the size of an XSAVEC/XSAVES area holding every kept
// component, XCR0 and IA32_XSS: components follow the header in index
// order, each 64-byte aligned if its sub-leaf says so.
func (xs xsaveLayout) compactedSize() uint32 {
	size := uint32(xsaveLegacyAreaSize)
	mask := (xs.user | xs.supervisor) &^ xsaveLegacyComponents
	for mask != 0 {
		i := uint32(bits.TrailingZeros64(mask))
		mask &^= 1 << i
		sub, ok := xs.subleaves[i]
		if !ok {
			continue
		}
		if sub.ECX&cpuidDCompAlign64 != 0 {
			size = (size + 63) &^ 63
		}
		size += sub.EAX
	}
	return size
}

// anyXFD reports whether some kept component can be disabled with XFD.
func (xs xsaveLayout) anyXFD() bool {
	for i, sub := range xs.subleaves {
		if (xs.user|xs.supervisor)&(1<<i) != 0 && sub.ECX&cpuidDCompXFD != 0 {
			return true
		}
	}
	return false
}

// findExact returns the entry for function and sub-leaf index, never an
// entry of another sub-leaf (kvm.CPUID.Find lets an entry without a
// significant index answer for every sub-leaf).
func findExact(c *kvm.CPUID, function, index uint32) *kvm.CPUIDEntry {
	for i := range c.Entries {
		if e := &c.Entries[i]; e.Function == function && e.Index == index {
			return e
		}
	}
	return nil
}
