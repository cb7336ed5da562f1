package vmm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/smolvm/smol/internal/testkernel"
	"github.com/smolvm/smol/kvm"
)

func TestGuestCPUIDDescribesTopology(t *testing.T) {
	supported := &kvm.CPUID{Entries: []kvm.CPUIDEntry{
		{Function: 0x1, EBX: 0xff00_0800, EDX: 0},
		{Function: 0xb, Index: 0, Flags: kvm.CPUIDFlagSignificantIndex},
		{Function: 0xb, Index: 1, Flags: kvm.CPUIDFlagSignificantIndex},
		{Function: 0x6, EAX: 0x77},
		{Function: 0x8000_0008, ECX: 0x7007},
	}}
	c := guestCPUID(supported, 3, 4)
	leaf1 := c.Find(0x1, 0)
	if leaf1 == nil || leaf1.EBX>>24 != 3 || (leaf1.EBX>>16)&0xff != 4 || leaf1.EBX&0xffff != 0x0800 {
		t.Fatalf("leaf 1 EBX = %#x", leaf1.EBX)
	}
	if leaf1.ECX&cpuid1ECXHypervisor == 0 || leaf1.EDX&cpuid1EDXHTT == 0 {
		t.Fatalf("leaf 1 ECX=%#x EDX=%#x: hypervisor and HTT bits must be set", leaf1.ECX, leaf1.EDX)
	}
	if l := c.Find(0xb, 1); l.EBX != 4 || l.EDX != 3 || l.EAX != 2 {
		t.Fatalf("leaf 0xb.1 = %+v", l)
	}
	if l := c.Find(0x6, 0); l.EAX != 0 {
		t.Fatalf("leaf 6 not hidden: %+v", l)
	}
	if l := c.Find(0x8000_0008, 0); l.ECX&0xff != 3 || (l.ECX>>12)&0xf != 2 {
		t.Fatalf("leaf 0x80000008 ECX = %#x", l.ECX)
	}
	if supported.Entries[0].EBX != 0xff00_0800 {
		t.Fatal("guestCPUID modified the supported set")
	}
	one := guestCPUID(supported, 0, 1).Find(0x1, 0)
	if one.EDX&cpuid1EDXHTT != 0 || (one.EBX>>16)&0xff != 1 {
		t.Fatalf("1 vCPU leaf 1 = %+v", one)
	}
}

// sig is CPUIDFlagSignificantIndex, short for the tables below.
const sig = kvm.CPUIDFlagSignificantIndex

// sapphireRapidsSupported is shaped like KVM_GET_SUPPORTED_CPUID on an
// Intel Xeon (Sapphire Rapids) with AMX, host kernel 6.18, in a process that
// has AMX guest permission: XTILECFG and XTILEDATA in 0xd.0 and their
// sub-leaves, XFD, CET supervisor state in IA32_XSS, the AMX bits in leaf 7
// (with the Granite Rapids AMX-FP16 and AMX-COMPLEX bits added) and the tile
// leaves 0x1d/0x1e.
func sapphireRapidsSupported() *kvm.CPUID {
	return &kvm.CPUID{Entries: []kvm.CPUIDEntry{
		{Function: 0x0, EAX: 0x1f, EBX: 0x756e6547, ECX: 0x6c65746e, EDX: 0x49656e69},
		{Function: 0x1, EAX: 0x806f8, EBX: 0x0800, ECX: 0xf7fa3203, EDX: 0x178bfbff},
		{Function: 0x7, Index: 0, Flags: sig, EAX: 2, EBX: 0xf1bf2ff9, ECX: 0x1b415f5e, EDX: 0xffc14410},
		{Function: 0x7, Index: 1, Flags: sig, EAX: 0x00201c30, EDX: 0x00000110},
		{Function: 0x7, Index: 2, Flags: sig, EDX: 0x3f},
		{Function: 0xd, Index: 0, Flags: sig, EAX: 0x000602e7, EBX: 0x2b00, ECX: 0x2b00},
		{Function: 0xd, Index: 1, Flags: sig, EAX: 0x1f, EBX: 0x2a00, ECX: 0x1800},
		{Function: 0xd, Index: 2, Flags: sig, EAX: 0x100, EBX: 0x240},
		{Function: 0xd, Index: 5, Flags: sig, EAX: 0x40, EBX: 0x440},
		{Function: 0xd, Index: 6, Flags: sig, EAX: 0x200, EBX: 0x480},
		{Function: 0xd, Index: 7, Flags: sig, EAX: 0x400, EBX: 0x680},
		{Function: 0xd, Index: 9, Flags: sig, EAX: 0x8, EBX: 0xa80},
		{Function: 0xd, Index: 11, Flags: sig, EAX: 0x10, ECX: 0x1},
		{Function: 0xd, Index: 12, Flags: sig, EAX: 0x18, ECX: 0x1},
		{Function: 0xd, Index: 17, Flags: sig, EAX: 0x40, EBX: 0xac0, ECX: 0x2},
		{Function: 0xd, Index: 18, Flags: sig, EAX: 0x2000, EBX: 0xb00, ECX: 0x6},
		{Function: 0x1d, Index: 0, Flags: sig, EAX: 1},
		{Function: 0x1d, Index: 1, Flags: sig, EAX: 0x04002000, EBX: 0x00080040, ECX: 0x10},
		{Function: 0x1e, Index: 0, Flags: sig, EBX: 0x4010},
		{Function: 0x1f, Index: 0, Flags: sig},
		{Function: 0x8000_0000, EAX: 0x8000_0008},
		{Function: 0x8000_0008, EAX: 0x3934, ECX: 0},
	}}
}

// withoutAMXPermission turns a supported set into what KVM reports to a
// process that has not asked for AMX guest permission (the shape of the
// failing host): KVM filters AMX out of leaf 0xd but still sets the leaf 7
// bits and reports 0x1d/0x1e.
func withoutAMXPermission(c *kvm.CPUID) *kvm.CPUID {
	out := &kvm.CPUID{}
	for _, e := range c.Entries {
		if e.Function == 0xd && (e.Index == 17 || e.Index == 18) {
			continue
		}
		if e.Function == 0xd && e.Index == 0 {
			e.EAX &^= xfeatureXTile
			e.EBX, e.ECX = 0xa88, 0xa88
		}
		if e.Function == 0xd && e.Index == 1 {
			e.EBX = 0x9b0
		}
		out.Entries = append(out.Entries, e)
	}
	return out
}

// checkNoUnsavableState fails unless c advertises only XSAVE state that
// KVM_GET_XSAVE carries, describes it consistently, and mentions AMX
// nowhere. exactBX also demands the EBX sizes a fresh set carries (KVM
// rewrites them from the guest's XCR0 and IA32_XSS once the CPUID is set).
func checkNoUnsavableState(t *testing.T, c *kvm.CPUID, exactBX bool) {
	t.Helper()
	if l := findExact(c, 0x7, 0); l != nil && l.EDX&(cpuid7EDXAMXBF16|cpuid7EDXAMXTile|cpuid7EDXAMXInt8) != 0 {
		t.Errorf("leaf 7.0 EDX = %#x advertises AMX", l.EDX)
	}
	if l := findExact(c, 0x7, 1); l != nil && (l.EAX&cpuid7s1EAXAMXFP16 != 0 || l.EDX&cpuid7s1EDXAMXComplx != 0) {
		t.Errorf("leaf 7.1 EAX = %#x EDX = %#x advertise AMX", l.EAX, l.EDX)
	}
	for _, e := range c.Entries {
		if e.Function == cpuidLeafAMXTile || e.Function == cpuidLeafAMXTMUL {
			t.Errorf("AMX leaf %#x.%d present: %+v", e.Function, e.Index, e)
		}
	}
	leaf0 := findExact(c, 0xd, 0)
	if leaf0 == nil {
		return
	}
	user := uint64(leaf0.EAX) | uint64(leaf0.EDX)<<32
	var supervisor uint64
	leaf1 := findExact(c, 0xd, 1)
	if leaf1 != nil {
		supervisor = uint64(leaf1.ECX) | uint64(leaf1.EDX)<<32
	}
	if user&xfeatureXTile != 0 {
		t.Errorf("0xd.0 EAX = %#x enables AMX tile state", leaf0.EAX)
	}
	// Every component above the legacy two has its sub-leaf, and every
	// sub-leaf belongs to a component.
	standard, compacted := uint32(xsaveLegacyAreaSize), uint32(xsaveLegacyAreaSize)
	for i := uint32(2); i < 64; i++ {
		sub := findExact(c, 0xd, i)
		on := (user|supervisor)&(1<<i) != 0
		switch {
		case on && sub == nil:
			t.Errorf("component %d enabled without a 0xd.%d sub-leaf", i, i)
			continue
		case !on && sub != nil:
			t.Errorf("sub-leaf 0xd.%d for a component the guest cannot enable: %+v", i, sub)
			continue
		case !on:
			continue
		}
		if sub.ECX&cpuidDCompXFD != 0 {
			t.Errorf("component %d is dynamic (XFD-capable): %+v", i, sub)
		}
		if user&(1<<i) != 0 {
			if end := sub.EBX + sub.EAX; end > guestXSaveLimit {
				t.Errorf("component %d ends at byte %d, beyond KVM_GET_XSAVE's %d", i, end, guestXSaveLimit)
			} else {
				standard = max(standard, end)
			}
		}
		if sub.ECX&cpuidDCompAlign64 != 0 {
			compacted = (compacted + 63) &^ 63
		}
		compacted += sub.EAX
	}
	if leaf0.ECX != standard || leaf0.ECX > guestXSaveLimit {
		t.Errorf("0xd.0 ECX = %d, the components need %d (limit %d)", leaf0.ECX, standard, guestXSaveLimit)
	}
	if leaf0.EBX > leaf0.ECX || (exactBX && leaf0.EBX != standard) {
		t.Errorf("0xd.0 EBX = %d, ECX = %d, components need %d", leaf0.EBX, leaf0.ECX, standard)
	}
	if leaf1 != nil && leaf1.EAX&(cpuidDs1EAXXSaveC|cpuidDs1EAXXSaveS) != 0 {
		if leaf1.EBX > compacted || (exactBX && leaf1.EBX != compacted) {
			t.Errorf("0xd.1 EBX = %d, the compacted area of the components is %d", leaf1.EBX, compacted)
		}
	}
}

func TestGuestCPUIDHidesAMX(t *testing.T) {
	for _, tc := range []struct {
		name      string
		supported *kvm.CPUID
	}{
		{"with AMX permission", sapphireRapidsSupported()},
		{"without AMX permission", withoutAMXPermission(sapphireRapidsSupported())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := guestCPUID(tc.supported, 0, 2)
			checkNoUnsavableState(t, c, true)

			// What remains is exactly the state of a Sapphire Rapids
			// without AMX: x87, SSE, AVX, AVX-512 and PKRU up to byte 2696.
			leaf0 := findExact(c, 0xd, 0)
			if leaf0.EAX != 0x2e7 || leaf0.EDX != 0 || leaf0.EBX != 2696 || leaf0.ECX != 2696 {
				t.Errorf("0xd.0 = %+v, want EAX 0x2e7, EBX = ECX = 2696", leaf0)
			}
			// 576 + AVX 256 + AVX-512 64+512+1024 + PKRU 8 + CET 16+24.
			leaf1 := findExact(c, 0xd, 1)
			if leaf1.EBX != 2480 || leaf1.ECX != 0x1800 {
				t.Errorf("0xd.1 = %+v, want EBX 2480 and the CET supervisor components kept", leaf1)
			}
			if leaf1.EAX != 0xf {
				t.Errorf("0xd.1 EAX = %#x, want XSAVEOPT/XSAVEC/XGETBV1/XSAVES and no XFD", leaf1.EAX)
			}
			for _, i := range []uint32{2, 5, 6, 7, 9, 11, 12} {
				if findExact(c, 0xd, i) == nil {
					t.Errorf("sub-leaf 0xd.%d dropped", i)
				}
			}
			// Only the AMX bits went: neighbours in the same registers stay.
			leaf7 := findExact(c, 0x7, 0)
			if want := uint32(0xffc14410) &^ (cpuid7EDXAMXBF16 | cpuid7EDXAMXTile | cpuid7EDXAMXInt8); leaf7.EDX != want {
				t.Errorf("leaf 7.0 EDX = %#x, want %#x", leaf7.EDX, want)
			}
			if l := findExact(c, 0x7, 1); l.EAX != 0x1c30 || l.EDX != 0x10 {
				t.Errorf("leaf 7.1 = %+v, want EAX 0x1c30 EDX 0x10", l)
			}
			if findExact(c, 0x1f, 0) == nil || findExact(c, 0x8000_0008, 0) == nil {
				t.Error("leaves other than the AMX ones were dropped")
			}
		})
	}
	// The guest's CPU must not depend on the process's permission.
	a := guestCPUID(sapphireRapidsSupported(), 1, 2)
	b := guestCPUID(withoutAMXPermission(sapphireRapidsSupported()), 1, 2)
	if !slices.Equal(a.Entries, b.Entries) {
		t.Errorf("guest CPUID differs with and without AMX permission:\n%+v\n%+v", a.Entries, b.Entries)
	}
}

// TestGuestCPUIDKeepsSavableXSave checks that hosts without AMX lose
// nothing: this table is an AMD EPYC's supported set (x87, SSE, AVX,
// AVX-512), which KVM_GET_XSAVE carries whole.
func TestGuestCPUIDKeepsSavableXSave(t *testing.T) {
	supported := &kvm.CPUID{Entries: []kvm.CPUIDEntry{
		{Function: 0x7, Index: 0, Flags: sig, EAX: 1, EBX: 0xf1bf2ff9, EDX: 0x10},
		{Function: 0xd, Index: 0, Flags: sig, EAX: 0xe7, EBX: 0x980, ECX: 0x980},
		{Function: 0xd, Index: 1, Flags: sig, EAX: 0xf, EBX: 0x980},
		{Function: 0xd, Index: 2, Flags: sig, EAX: 0x100, EBX: 0x240},
		{Function: 0xd, Index: 5, Flags: sig, EAX: 0x40, EBX: 0x340},
		{Function: 0xd, Index: 6, Flags: sig, EAX: 0x200, EBX: 0x380},
		{Function: 0xd, Index: 7, Flags: sig, EAX: 0x400, EBX: 0x580},
	}}
	c := guestCPUID(supported, 0, 1)
	checkNoUnsavableState(t, c, true)
	if !slices.Equal(c.Entries, supported.Entries) {
		t.Errorf("guest CPUID changed savable state:\n got %+v\nwant %+v", c.Entries, supported.Entries)
	}
}

// TestGuestCPUIDDropsLoneTileConfig: XTILECFG fits in KVM_GET_XSAVE's
// area, but XCR0 cannot enable it without XTILEDATA, so it goes too.
func TestGuestCPUIDDropsLoneTileConfig(t *testing.T) {
	supported := &kvm.CPUID{Entries: []kvm.CPUIDEntry{
		{Function: 0xd, Index: 0, Flags: sig, EAX: 0x20007, EBX: 0xb00, ECX: 0xb00},
		{Function: 0xd, Index: 2, Flags: sig, EAX: 0x100, EBX: 0x240},
		{Function: 0xd, Index: 17, Flags: sig, EAX: 0x40, EBX: 0xac0, ECX: 0x2},
	}}
	c := guestCPUID(supported, 0, 1)
	checkNoUnsavableState(t, c, true)
	if l := findExact(c, 0xd, 0); l.EAX != 0x7 || l.ECX != 0x340 {
		t.Errorf("0xd.0 = %+v, want EAX 7 ECX 0x340", l)
	}
}

// kvmOwned clears the CPUID bits KVM itself keeps up to date from the vCPU's
// state (kvm_update_cpuid_runtime), which therefore read back differently
// from what was set: OSXSAVE, MWAIT and the APIC bit in leaf 1, OSPKE in leaf
// 7, the current XSAVE sizes in 0xd.0 and 0xd.1 EBX, the paravirtual
// features in 0x4000_0001.
func kvmOwned(e kvm.CPUIDEntry) kvm.CPUIDEntry {
	switch {
	case e.Function == 0x1:
		e.ECX &^= 1<<27 | 1<<3
		e.EDX &^= 1 << 9
	case e.Function == 0x7 && e.Index == 0:
		e.ECX &^= 1 << 4
	case e.Function == 0xd && e.Index <= 1:
		e.EBX = 0
	case e.Function == 0x4000_0001:
		e.EAX = 0
	}
	return e
}

// TestMachineCPUIDOnHostKVM builds a machine on this host's /dev/kvm and
// reads each vCPU's CPUID back with KVM_GET_CPUID2: whatever the host (Intel
// or AMD, with AMX or without, with or without the process's AMX guest
// permission), the guest is told of no state KVM_GET_XSAVE cannot carry.
//
// KVM may report some leaves other than as set, beyond the bits it owns:
// PVM, whose guests run CPUID natively unless it intercepts it, reports the
// host's own feature bits for leaves 1 and 7 and 0xd.1 EAX (measured on an
// AMD EPYC). Those are not the VMM's to hide, so for such leaves the test
// checks the table the VMM set and logs what KVM reported; everything KVM
// kept as set, and every leaf KVM dropped or kept, is checked as read back.
func TestMachineCPUIDOnHostKVM(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Setenv("SMOL_ALLOW_PVM", "1")
	kernel := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, []byte{0xf4}), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Kernel: kernel, CPUs: 2, Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	supported, err := supportedCPUID(m.sys)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := m.sys.CheckExtension(kvm.CapTSCDeadlineTimer); n > 0 {
		if l := findExact(supported, 0x1, 0); l == nil || l.ECX&cpuid1ECXTSCDeadline == 0 {
			t.Errorf("KVM has the TSC-deadline timer, the guest's leaf 1 does not say so: %+v", l)
		}
	}
	if l := findExact(supported, 0x7, 0); l != nil && l.EDX&cpuid7EDXAMXTile != 0 {
		t.Logf("this host's KVM offers AMX-TILE (0xd.0 EAX %#x)", findExact(supported, 0xd, 0).EAX)
	}
	for _, v := range m.vcpus {
		set := guestCPUID(supported, v.index, len(m.vcpus))
		got, err := v.fd.CPUID()
		if err != nil {
			t.Fatal(err)
		}
		checked := &kvm.CPUID{}
		for _, g := range got.Entries {
			s := findExact(set, g.Function, g.Index)
			if s == nil {
				t.Errorf("vCPU %d: KVM_GET_CPUID2 has leaf %#x.%d, which was not set", v.index, g.Function, g.Index)
				continue
			}
			if kvmOwned(g) != kvmOwned(*s) {
				if v.index == 0 {
					t.Logf("KVM reports leaf %#x.%d as %#x %#x %#x %#x, set %#x %#x %#x %#x",
						g.Function, g.Index, g.EAX, g.EBX, g.ECX, g.EDX, s.EAX, s.EBX, s.ECX, s.EDX)
				}
				g = *s
			}
			checked.Entries = append(checked.Entries, g)
		}
		checkNoUnsavableState(t, checked, false)
		// Whatever KVM reports, the components the guest may enable in XCR0
		// are at most those set: KVM derives XCR0's limit from that table.
		if g, s := findExact(got, 0xd, 0), findExact(set, 0xd, 0); g != nil && s != nil && (g.EAX&^s.EAX != 0 || g.EDX&^s.EDX != 0) {
			t.Errorf("vCPU %d: KVM_GET_CPUID2 0xd.0 = %+v, more components than set %+v", v.index, g, s)
		}
		if _, err := v.fd.XSave(); err != nil {
			t.Errorf("vCPU %d: %v", v.index, err)
		}
	}
}
