package kvm

import (
	"slices"
	"testing"
)

// MSRs every x86_64 KVM saves and lets the VMM set freely.
const (
	msrSysenterCS   = 0x174
	msrSysenterESP  = 0x175
	msrSysenterEIP  = 0x176
	msrSTAR         = 0xc0000081
	msrLSTAR        = 0xc0000082
	msrCSTAR        = 0xc0000083
	msrSyscallMask  = 0xc0000084
	msrKernelGSBase = 0xc0000102
)

// Offsets in the XSAVE area, in 32-bit words of XSave.Region.
const (
	xsaveMXCSR    = 24 / 4
	xsaveXStateBV = 512 / 4 // low half of the XSTATE_BV header field
	xfeatureSSE   = 1 << 1
)

// newStateVM makes a VM with the in-kernel irqchip and PIT and one vCPU
// whose CPUID is KVM's supported set, the state a VMM restores into.
func newStateVM(t *testing.T) (*System, *VM, *VCPU) {
	t.Helper()
	sys, vm, _ := newVM(t, 0)
	if err := vm.CreateIRQChip(); err != nil {
		t.Fatal(err)
	}
	if err := vm.CreatePIT2(PITConfig{Flags: PITSpeakerDummy}); err != nil {
		t.Fatal(err)
	}
	vcpu, err := vm.CreateVCPU(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vcpu.Close() })
	cpuid, err := sys.SupportedCPUID()
	if err != nil {
		t.Fatal(err)
	}
	if err := vcpu.SetCPUID(cpuid); err != nil {
		t.Fatal(err)
	}
	return sys, vm, vcpu
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestVCPUStateRoundTrips(t *testing.T) {
	sys, _, vcpu := newStateVM(t)

	t.Run("regs", func(t *testing.T) {
		want := Regs{RAX: 1, RBX: 2, RCX: 3, RDX: 4, RSI: 5, RDI: 6, RSP: 7, RBP: 8,
			R8: 9, R9: 10, R10: 11, R11: 12, R12: 13, R13: 14, R14: 15, R15: 16,
			RIP: 0x1234, RFLAGS: 0x202}
		must(t, vcpu.SetRegs(want))
		got, err := vcpu.Regs()
		must(t, err)
		if got != want {
			t.Fatalf("Regs() = %+v, want %+v", got, want)
		}
	})

	t.Run("sregs", func(t *testing.T) {
		want, err := vcpu.Sregs()
		must(t, err)
		want.CS = flatSegment(selCode64, 0xb, 0, true)
		want.GDT = DTable{Base: 0x1000, Limit: 0x3f}
		want.IDT = DTable{Base: 0x2000, Limit: 0xfff}
		want.CR3 = 0x5000
		want.CR4 = cr4PAE
		want.CR0 = cr0PE | cr0ET | cr0PG
		want.EFER = eferLME | eferLMA
		must(t, vcpu.SetSregs(want))
		got, err := vcpu.Sregs()
		must(t, err)
		if got != want {
			t.Fatalf("Sregs() = %+v\nwant %+v", got, want)
		}
	})

	t.Run("fpu", func(t *testing.T) {
		want, err := vcpu.FPU()
		must(t, err)
		want.FCW = 0x27f // round to nearest, double precision
		for i := range want.XMM[5] {
			want.XMM[5][i] = byte(0xa0 + i)
		}
		must(t, vcpu.SetFPU(want))
		got, err := vcpu.FPU()
		must(t, err)
		if got.FCW != want.FCW || got.XMM != want.XMM {
			t.Fatalf("FPU() fcw %#x xmm5 % x; want %#x % x", got.FCW, got.XMM[5], want.FCW, want.XMM[5])
		}
		// MXCSR is ignored by both KVM_GET_FPU and KVM_SET_FPU; the xsave
		// subtest covers it.
	})

	t.Run("xsave", func(t *testing.T) {
		requireCap(t, sys, CapXSave)
		x, err := vcpu.XSave()
		must(t, err)
		// The legacy FXSAVE area holds XMM7 at byte 160+7*16. XSTATE_BV
		// must mark SSE state as present, or KVM loads XMM as zeroes.
		const xmm7 = (160 + 7*16) / 4
		for i := 0; i < 4; i++ {
			x.Region[xmm7+i] = 0xc0ffee00 + uint32(i)
		}
		x.Region[xsaveXStateBV] |= xfeatureSSE
		x.Region[xsaveMXCSR] = 0x1fa0
		must(t, vcpu.SetXSave(x))
		got, err := vcpu.XSave()
		must(t, err)
		if got.Region[xsaveMXCSR] != 0x1fa0 {
			t.Fatalf("XSave() MXCSR = %#x, want 0x1fa0", got.Region[xsaveMXCSR])
		}
		if !slices.Equal(got.Region[xmm7:xmm7+4], x.Region[xmm7:xmm7+4]) {
			t.Fatalf("XSave() xmm7 = %x, want %x", got.Region[xmm7:xmm7+4], x.Region[xmm7:xmm7+4])
		}
		if err := vcpu.SetXSave(nil); err == nil {
			t.Error("SetXSave(nil) succeeded")
		}
	})

	t.Run("xcrs", func(t *testing.T) {
		requireCap(t, sys, CapXCRs)
		x, err := vcpu.XCRs()
		must(t, err)
		if x.NrXCRs < 1 || x.XCRs[0].XCR != 0 {
			t.Fatalf("XCRs() = %+v, want XCR0 first", x)
		}
		// x87 alone and x87|SSE are valid for any guest with SSE in its
		// CPUID; switch to whichever is not set now.
		want := uint64(0x3)
		if x.XCRs[0].Value == want {
			want = 0x1
		}
		x.XCRs[0].Value = want
		must(t, vcpu.SetXCRs(x))
		got, err := vcpu.XCRs()
		must(t, err)
		if got.XCRs[0].Value != want {
			t.Fatalf("XCR0 = %#x, want %#x", got.XCRs[0].Value, want)
		}
	})

	t.Run("lapic", func(t *testing.T) {
		l, err := vcpu.LAPIC()
		must(t, err)
		const tpr = 0x80
		l.Regs[tpr] = 0x30
		must(t, vcpu.SetLAPIC(l))
		got, err := vcpu.LAPIC()
		must(t, err)
		if got.Regs[tpr] != 0x30 {
			t.Fatalf("LAPIC TPR = %#x, want 0x30", got.Regs[tpr])
		}
	})

	t.Run("msrs", func(t *testing.T) {
		list, err := sys.MSRIndexList()
		must(t, err)
		// SYSENTER_ESP/EIP get 32-bit values: on AMD, KVM keeps only
		// their low halves (AMD has no 64-bit SYSENTER) unless the
		// guest's CPUID claims an Intel vendor.
		want := []MSREntry{
			{Index: msrSysenterCS, Data: 0x10},
			{Index: msrSysenterESP, Data: 0x8000_1000},
			{Index: msrSysenterEIP, Data: 0x8000_2000},
			{Index: msrSTAR, Data: 0x0023_0010_0000_0000},
			{Index: msrLSTAR, Data: 0xffff_8000_0000_3000},
			{Index: msrCSTAR, Data: 0xffff_8000_0000_4000},
			{Index: msrSyscallMask, Data: 0x47700},
			{Index: msrKernelGSBase, Data: 0xffff_8000_0000_5000},
		}
		var indices []uint32
		for _, e := range want {
			if !slices.Contains(list, e.Index) {
				t.Fatalf("MSR %#x not in MSRIndexList", e.Index)
			}
			indices = append(indices, e.Index)
		}
		must(t, vcpu.SetMSRs(want))
		got, err := vcpu.GetMSRs(indices)
		must(t, err)
		if !slices.Equal(got, want) {
			t.Fatalf("GetMSRs = %+v, want %+v", got, want)
		}
		// Every listed MSR must be readable: that is what the list is for.
		all, err := vcpu.GetMSRs(list)
		if err != nil {
			t.Fatalf("GetMSRs(all %d of MSRIndexList): %v", len(list), err)
		}
		if len(all) != len(list) {
			t.Fatalf("GetMSRs returned %d entries for %d indices", len(all), len(list))
		}
		// More than one KVM_GET_MSRS can carry goes out in chunks.
		many := make([]uint32, 2*maxMSRsPerCall+3)
		for i := range many {
			many[i] = want[i%len(want)].Index
		}
		gotMany, err := vcpu.GetMSRs(many)
		must(t, err)
		for i, e := range gotMany {
			if w := want[i%len(want)]; e != w {
				t.Fatalf("GetMSRs(%d indices)[%d] = %+v, want %+v", len(many), i, e, w)
			}
		}
		// A nonexistent MSR must be reported, not silently dropped.
		if _, err := vcpu.GetMSRs([]uint32{msrSysenterCS, 0x0bad0bad}); err == nil {
			t.Fatal("GetMSRs with a bogus index succeeded")
		}
	})

	t.Run("mp_state", func(t *testing.T) {
		got, err := vcpu.MPState()
		must(t, err)
		if got != MPStateRunnable {
			t.Fatalf("initial MPState = %d, want runnable", got)
		}
		must(t, vcpu.SetMPState(MPStateHalted))
		got, err = vcpu.MPState()
		must(t, err)
		if got != MPStateHalted {
			t.Fatalf("MPState = %d, want halted", got)
		}
		must(t, vcpu.SetMPState(MPStateRunnable))
	})

	t.Run("vcpu_events", func(t *testing.T) {
		requireCap(t, sys, CapVCPUEvents)
		e, err := vcpu.VCPUEvents()
		must(t, err)
		e.NMI.Masked = 1
		e.NMI.Pending = 1
		e.Flags = VCPUEventValidNMIPending
		must(t, vcpu.SetVCPUEvents(e))
		got, err := vcpu.VCPUEvents()
		must(t, err)
		// (SIPIVector is write-only: KVM always reports it as 0.)
		if got.NMI.Masked != 1 || got.NMI.Pending != 1 {
			t.Fatalf("VCPUEvents() = %+v, want NMI masked and pending", got)
		}
		// Clear the pending NMI again for the subtests that follow.
		got.NMI.Pending = 0
		got.Flags = VCPUEventValidNMIPending
		must(t, vcpu.SetVCPUEvents(got))
	})

	t.Run("debugregs", func(t *testing.T) {
		requireCap(t, sys, CapDebugRegs)
		d, err := vcpu.DebugRegs()
		must(t, err)
		d.DB = [4]uint64{0x1000, 0x2000, 0x3000, 0x4000}
		d.DR7 = 0x400 | 1 // reserved bit 10 set, L0 enabled
		d.Flags = 0
		must(t, vcpu.SetDebugRegs(d))
		got, err := vcpu.DebugRegs()
		must(t, err)
		if got.DB != d.DB || got.DR7 != d.DR7 {
			t.Fatalf("DebugRegs() = %+v, want DB %x DR7 %#x", got, d.DB, d.DR7)
		}
	})

	t.Run("cpuid2", func(t *testing.T) {
		sup, err := sys.SupportedCPUID()
		must(t, err)
		// Change something KVM passes through untouched: the brand string.
		brand := sup.Find(0x80000002, 0)
		if brand == nil {
			t.Skip("no brand-string leaf in the supported CPUID")
		}
		brand.EAX = 0x6c6f6d73 // "smol"
		must(t, vcpu.SetCPUID(sup))
		got, err := vcpu.CPUID()
		must(t, err)
		// KVM keeps the leaves it accepts, not necessarily all of them
		// (TestSetCPUIDKeepsASubset); the leaves kept must include the
		// edited one, with the edit.
		for _, e := range cpuidDropped(t, sup, got) {
			t.Logf("KVM_SET_CPUID2 dropped leaf %#x.%d", e.Function, e.Index)
		}
		if e := got.Find(0x80000002, 0); e == nil || e.EAX != 0x6c6f6d73 {
			t.Fatalf("brand leaf after round trip = %+v", e)
		}
		if e, w := got.Find(0, 0), sup.Find(0, 0); e == nil || *e != *w {
			t.Fatalf("leaf 0 after round trip = %+v, want %+v", e, w)
		}
		if err := vcpu.SetCPUID(nil); err == nil {
			t.Error("SetCPUID(nil) succeeded")
		}
	})

	t.Run("tsc_khz", func(t *testing.T) {
		requireCap(t, sys, CapGetTSCKHz)
		khz, err := vcpu.TSCKHz()
		must(t, err)
		if khz == 0 {
			// KVM reports 0 when the host kernel could not calibrate
			// its TSC; there is no frequency to set back.
			t.Skip("KVM does not know this host's TSC frequency (KVM_GET_TSC_KHZ = 0)")
		}
		// Setting the host's own frequency needs no TSC scaling, so it
		// must work wherever KVM_SET_TSC_KHZ exists.
		must(t, vcpu.SetTSCKHz(khz))
		// A different frequency needs hardware TSC scaling.
		changed := khz - 1000
		if err := vcpu.SetTSCKHz(changed); err != nil {
			t.Logf("SetTSCKHz(%d) on a %d kHz host: %v (no TSC scaling here)", changed, khz, err)
			return
		}
		got, err := vcpu.TSCKHz()
		must(t, err)
		if got != changed {
			t.Fatalf("TSCKHz() = %d after setting %d", got, changed)
		}
	})
}

func TestVMStateRoundTrips(t *testing.T) {
	sys, vm, _ := newStateVM(t)

	t.Run("clock", func(t *testing.T) {
		requireCap(t, sys, CapAdjustClock)
		const want = 1_000_000_000_000 // 1000 s of guest time
		must(t, vm.SetClock(ClockData{Clock: want}))
		got, err := vm.GetClock()
		must(t, err)
		// The clock keeps running between the two calls.
		if got.Clock < want || got.Clock > want+10_000_000_000 {
			t.Fatalf("GetClock() = %d ns, want just after %d", got.Clock, want)
		}
	})

	t.Run("pic", func(t *testing.T) {
		c, err := vm.GetIRQChip(IRQChipPICSlave)
		must(t, err)
		pic := c.PIC()
		pic.IMR = 0xa5
		c.SetPIC(pic)
		must(t, vm.SetIRQChip(c))
		got, err := vm.GetIRQChip(IRQChipPICSlave)
		must(t, err)
		if got.PIC().IMR != 0xa5 {
			t.Fatalf("slave PIC IMR = %#x, want 0xa5", got.PIC().IMR)
		}
	})

	t.Run("ioapic", func(t *testing.T) {
		c, err := vm.GetIRQChip(IRQChipIOAPIC)
		must(t, err)
		io := c.IOAPIC()
		if io.BaseAddress != 0xfec00000 {
			t.Errorf("IOAPIC base %#x, want 0xfec00000", io.BaseAddress)
		}
		const entry = 1<<16 | 0x35 // masked, vector 0x35
		io.RedirTbl[5] = entry
		c.SetIOAPIC(io)
		must(t, vm.SetIRQChip(c))
		got, err := vm.GetIRQChip(IRQChipIOAPIC)
		must(t, err)
		if r := got.IOAPIC().RedirTbl[5]; r != entry {
			t.Fatalf("IOAPIC redirtbl[5] = %#x, want %#x", r, entry)
		}
	})

	t.Run("pit2", func(t *testing.T) {
		s, err := vm.GetPIT2()
		must(t, err)
		s.Channels[0].Count = 0x1234
		s.Channels[0].Mode = 2
		s.Flags = PITFlagsSpeakerAttached
		must(t, vm.SetPIT2(s))
		got, err := vm.GetPIT2()
		must(t, err)
		if got.Channels[0].Count != 0x1234 || got.Channels[0].Mode != 2 || got.Flags&PITFlagsSpeakerAttached == 0 {
			t.Fatalf("PIT channel 0 = %+v flags %#x, want count 0x1234 mode 2 speaker", got.Channels[0], got.Flags)
		}
	})

	t.Run("irq_line", func(t *testing.T) {
		must(t, vm.IRQLine(4, true))
		must(t, vm.IRQLine(4, false))
	})
}

func requireCap(t *testing.T, sys *System, c Cap) {
	t.Helper()
	n, err := sys.CheckExtension(c)
	must(t, err)
	if n <= 0 {
		t.Skipf("KVM here lacks capability %d", c)
	}
}

// cpuidKey names one CPUID leaf and sub-leaf as KVM matches entries.
type cpuidKey struct{ function, index uint32 }

func keyOf(e CPUIDEntry) cpuidKey {
	if e.Flags&CPUIDFlagSignificantIndex == 0 {
		return cpuidKey{e.Function, 0}
	}
	return cpuidKey{e.Function, e.Index}
}

// cpuidDropped checks what KVM_SET_CPUID2 promises about a round trip
// through KVM_GET_CPUID2: the vCPU's table holds only leaves that were set,
// each once. It returns the leaves that were set and are gone. Values are
// only logged where they differ: KVM owns some bits and rewrites them to
// follow the vCPU (OSXSAVE, the APIC and MWAIT bits of leaf 1, OSPKE, the
// XSAVE sizes in 0xd.0/0xd.1 EBX, SGX's XFRM in 0x12.1, paravirtual
// features), PVM reports the host's own feature bits in leaves 1 and 7,
// and which bits varies by kernel; callers check the values they rely on.
func cpuidDropped(t *testing.T, set, got *CPUID) []CPUIDEntry {
	t.Helper()
	given := map[cpuidKey]CPUIDEntry{}
	for _, e := range set.Entries {
		given[keyOf(e)] = e
	}
	kept := map[cpuidKey]bool{}
	for _, e := range got.Entries {
		k := keyOf(e)
		w, ok := given[k]
		switch {
		case !ok:
			t.Errorf("KVM_GET_CPUID2 has leaf %#x.%d, which was not set", e.Function, e.Index)
		case e != w:
			t.Logf("leaf %#x.%d reads back eax %#x ebx %#x ecx %#x edx %#x, set %#x %#x %#x %#x",
				e.Function, e.Index, e.EAX, e.EBX, e.ECX, e.EDX, w.EAX, w.EBX, w.ECX, w.EDX)
		}
		if kept[k] {
			t.Errorf("KVM_GET_CPUID2 has leaf %#x.%d twice", e.Function, e.Index)
		}
		kept[k] = true
	}
	var dropped []CPUIDEntry
	for _, e := range set.Entries {
		if !kept[keyOf(e)] {
			dropped = append(dropped, e)
		}
	}
	return dropped
}

// TestSetCPUIDKeepsASubset documents that KVM_SET_CPUID2 may keep fewer
// leaves than it was given, silently: on an Intel Xeon with AMX (host
// kernel 6.18, this project's PVM flavour of KVM) KVM_GET_SUPPORTED_CPUID
// lists the AMX tile leaves 0x1d and 0x1e, and after setting that very set
// KVM_GET_CPUID2 no longer has them; the process had not asked for AMX
// guest permission. KVM may also report values other than those set (it
// owns some bits, and PVM reports the host's own feature leaves). So a VMM
// that needs to know what its guest sees reads the table back, and a test
// may only expect the kept leaves to be a subset of the set ones, with the
// leaves every guest needs (0, 1) among them. Hosts that keep everything
// (AMD, Intel without AMX) pass the same way.
func TestSetCPUIDKeepsASubset(t *testing.T) {
	sys, vm, _ := newVM(t, 0)
	vcpu, err := vm.CreateVCPU(0)
	must(t, err)
	t.Cleanup(func() { vcpu.Close() })
	sup, err := sys.SupportedCPUID()
	must(t, err)
	must(t, vcpu.SetCPUID(sup))
	got, err := vcpu.CPUID()
	must(t, err)
	dropped := cpuidDropped(t, sup, got)
	for _, e := range dropped {
		t.Logf("dropped %#x.%d (flags %#x): eax %#x ebx %#x ecx %#x edx %#x", e.Function, e.Index, e.Flags, e.EAX, e.EBX, e.ECX, e.EDX)
	}
	t.Logf("KVM kept %d of %d supported leaves", len(got.Entries), len(sup.Entries))
	for _, f := range []uint32{0, 1} {
		if got.Find(f, 0) == nil {
			t.Errorf("leaf %#x was dropped", f)
		}
	}
}
