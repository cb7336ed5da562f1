package kvm

import (
	"testing"
	"unsafe"
)

// The expected values below were produced by compiling a C program against
// the x86_64 <linux/kvm.h> (sizeof, offsetof and the KVM_* request macros),
// so they are the kernel's ABI, not a restatement of the Go code.

func TestStructSizesMatchKernel(t *testing.T) {
	cases := []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"kvm_regs", unsafe.Sizeof(Regs{}), 144},
		{"kvm_irq_routing_entry", unsafe.Sizeof(irqRoutingEntry{}), 48},
		{"kvm_segment", unsafe.Sizeof(Segment{}), 24},
		{"kvm_dtable", unsafe.Sizeof(DTable{}), 16},
		{"kvm_sregs", unsafe.Sizeof(Sregs{}), 312},
		{"kvm_fpu", unsafe.Sizeof(FPU{}), 416},
		{"kvm_xsave", unsafe.Sizeof(XSave{}), 4096},
		{"kvm_xcr", unsafe.Sizeof(XCR{}), 16},
		{"kvm_xcrs", unsafe.Sizeof(XCRs{}), 392},
		{"kvm_lapic_state", unsafe.Sizeof(LAPICState{}), 1024},
		{"kvm_mp_state", unsafe.Sizeof(MPState(0)), 4},
		{"kvm_vcpu_events", unsafe.Sizeof(VCPUEvents{}), 64},
		{"kvm_debugregs", unsafe.Sizeof(DebugRegs{}), 128},
		{"kvm_clock_data", unsafe.Sizeof(ClockData{}), 48},
		{"kvm_irqchip", unsafe.Sizeof(IRQChip{}), 520},
		{"kvm_pic_state", unsafe.Sizeof(PICState{}), 16},
		{"kvm_ioapic_state", unsafe.Sizeof(IOAPICState{}), 216},
		{"kvm_pit_channel_state", unsafe.Sizeof(PITChannelState{}), 24},
		{"kvm_pit_state2", unsafe.Sizeof(PITState2{}), 112},
		{"kvm_pit_config", unsafe.Sizeof(PITConfig{}), 64},
		{"kvm_cpuid_entry2", unsafe.Sizeof(CPUIDEntry{}), 40},
		{"kvm_cpuid2", unsafe.Sizeof(cpuidHeader{}), 8},
		{"kvm_msr_entry", unsafe.Sizeof(MSREntry{}), 16},
		{"kvm_msrs", unsafe.Sizeof(msrsHeader{}), 8},
		{"kvm_msr_list", unsafe.Sizeof(msrListHeader{}), 4},
		{"kvm_userspace_memory_region", unsafe.Sizeof(UserMemoryRegion{}), 32},
		{"kvm_ioeventfd", unsafe.Sizeof(IOEventFD{}), 64},
		{"kvm_irqfd", unsafe.Sizeof(irqFD{}), 32},
		{"kvm_irq_level", unsafe.Sizeof(irqLevel{}), 8},
		{"kvm_dirty_log", unsafe.Sizeof(dirtyLog{}), 16},
		{"kvm_enable_cap", unsafe.Sizeof(enableCap{}), 104},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("sizeof(struct %s) = %d, kernel has %d", c.name, c.got, c.want)
		}
	}
}

func TestFieldOffsetsMatchKernel(t *testing.T) {
	var ev VCPUEvents
	cases := []struct {
		name      string
		got, want uintptr
	}{
		{"kvm_vcpu_events.smi", unsafe.Offsetof(ev.SMI), 24},
		{"kvm_vcpu_events.triple_fault", unsafe.Offsetof(ev.TripleFault), 28},
		{"kvm_vcpu_events.exception_payload", unsafe.Offsetof(ev.ExceptionPayload), 56},
		{"kvm_run.io", runExitUnion, 32},
		{"kvm_run.io.count", runIOCount, 36},
		{"kvm_run.io.data_offset", runIODataOffset, 40},
		{"kvm_run.mmio.data", runMMIOData, 40},
		{"kvm_run.mmio.len", runMMIOLen, 48},
		{"kvm_run.mmio.is_write", runMMIOIsWrite, 52},
		{"kvm_run.fail_entry.cpu", runFailEntryCPU, 40},
		{"kvm_run.internal.data", runInternalData, 40},
		{"kvm_run.system_event.data", runSystemEventData, 40},
		{"kvm_run.debug.arch.pc", runDebugPC, 40},
		{"sizeof(kvm_run)", runStructSize, 2352},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %d, kernel has %d", c.name, c.got, c.want)
		}
	}
}

func TestIoctlNumbersMatchKernel(t *testing.T) {
	cases := []struct {
		name      string
		got, want uintptr
	}{
		{"KVM_GET_API_VERSION", kvmGetAPIVersion, 0xae00},
		{"KVM_CREATE_VM", kvmCreateVM, 0xae01},
		{"KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList, 0xc004ae02},
		{"KVM_CHECK_EXTENSION", kvmCheckExtension, 0xae03},
		{"KVM_GET_VCPU_MMAP_SIZE", kvmGetVCPUMmapSize, 0xae04},
		{"KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID, 0xc008ae05},
		{"KVM_GET_EMULATED_CPUID", kvmGetEmulatedCPUID, 0xc008ae09},
		{"KVM_GET_MSR_FEATURE_INDEX_LIST", kvmGetMSRFeatureIndexList, 0xc004ae0a},
		{"KVM_CREATE_VCPU", kvmCreateVCPU, 0xae41},
		{"KVM_GET_DIRTY_LOG", kvmGetDirtyLog, 0x4010ae42},
		{"KVM_SET_USER_MEMORY_REGION", kvmSetUserMemoryRegion, 0x4020ae46},
		{"KVM_SET_TSS_ADDR", kvmSetTSSAddr, 0xae47},
		{"KVM_SET_IDENTITY_MAP_ADDR", kvmSetIdentityMapAddr, 0x4008ae48},
		{"KVM_CREATE_IRQCHIP", kvmCreateIRQChip, 0xae60},
		{"KVM_IRQ_LINE", kvmIRQLine, 0x4008ae61},
		{"KVM_GET_IRQCHIP", kvmGetIRQChip, 0xc208ae62},
		{"KVM_SET_IRQCHIP", kvmSetIRQChip, 0x8208ae63},
		{"KVM_IRQFD", kvmIRQFD, 0x4020ae76},
		{"KVM_SET_GSI_ROUTING", kvmSetGSIRouting, 0x4008ae6a},
		{"KVM_CREATE_PIT2", kvmCreatePIT2, 0x4040ae77},
		{"KVM_IOEVENTFD", kvmIOEventFD, 0x4040ae79},
		{"KVM_SET_CLOCK", kvmSetClock, 0x4030ae7b},
		{"KVM_GET_CLOCK", kvmGetClock, 0x8030ae7c},
		{"KVM_GET_PIT2", kvmGetPIT2, 0x8070ae9f},
		{"KVM_SET_PIT2", kvmSetPIT2, 0x4070aea0},
		{"KVM_ENABLE_CAP", kvmEnableCap, 0x4068aea3},
		{"KVM_RUN", kvmRun, 0xae80},
		{"KVM_GET_REGS", kvmGetRegs, 0x8090ae81},
		{"KVM_SET_REGS", kvmSetRegs, 0x4090ae82},
		{"KVM_GET_SREGS", kvmGetSregs, 0x8138ae83},
		{"KVM_SET_SREGS", kvmSetSregs, 0x4138ae84},
		{"KVM_GET_MSRS", kvmGetMSRs, 0xc008ae88},
		{"KVM_SET_MSRS", kvmSetMSRs, 0x4008ae89},
		{"KVM_GET_FPU", kvmGetFPU, 0x81a0ae8c},
		{"KVM_SET_FPU", kvmSetFPU, 0x41a0ae8d},
		{"KVM_GET_LAPIC", kvmGetLAPIC, 0x8400ae8e},
		{"KVM_SET_LAPIC", kvmSetLAPIC, 0x4400ae8f},
		{"KVM_SET_CPUID2", kvmSetCPUID2, 0x4008ae90},
		{"KVM_GET_CPUID2", kvmGetCPUID2, 0xc008ae91},
		{"KVM_GET_MP_STATE", kvmGetMPState, 0x8004ae98},
		{"KVM_SET_MP_STATE", kvmSetMPState, 0x4004ae99},
		{"KVM_NMI", kvmNMI, 0xae9a},
		{"KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, 0x8040ae9f},
		{"KVM_SET_VCPU_EVENTS", kvmSetVCPUEvents, 0x4040aea0},
		{"KVM_GET_DEBUGREGS", kvmGetDebugRegs, 0x8080aea1},
		{"KVM_SET_DEBUGREGS", kvmSetDebugRegs, 0x4080aea2},
		{"KVM_SET_TSC_KHZ", kvmSetTSCKHz, 0xaea2},
		{"KVM_GET_TSC_KHZ", kvmGetTSCKHz, 0xaea3},
		{"KVM_GET_XSAVE", kvmGetXSave, 0x9000aea4},
		{"KVM_SET_XSAVE", kvmSetXSave, 0x5000aea5},
		{"KVM_GET_XCRS", kvmGetXCRs, 0x8188aea6},
		{"KVM_SET_XCRS", kvmSetXCRs, 0x4188aea7},
		{"KVM_KVMCLOCK_CTRL", kvmKVMClockCtrl, 0xaead},
		{"KVM_GET_XSAVE2", kvmGetXSave2, 0x9000aecf},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %#x, kernel has %#x", c.name, c.got, c.want)
		}
	}
}

func TestCPUIDFind(t *testing.T) {
	c := &CPUID{Entries: []CPUIDEntry{
		{Function: 0, EAX: 0xd},
		{Function: 7, Index: 0, Flags: CPUIDFlagSignificantIndex, EBX: 1},
		{Function: 7, Index: 1, Flags: CPUIDFlagSignificantIndex, EBX: 2},
	}}
	if e := c.Find(0, 5); e == nil || e.EAX != 0xd {
		t.Errorf("Find(0, 5) = %+v, want the leaf-0 entry (index not significant)", e)
	}
	if e := c.Find(7, 1); e == nil || e.EBX != 2 {
		t.Errorf("Find(7, 1) = %+v, want sub-leaf 1", e)
	}
	if e := c.Find(7, 2); e != nil {
		t.Errorf("Find(7, 2) = %+v, want nil", e)
	}
	if e := (*CPUID)(nil).Find(0, 0); e != nil {
		t.Errorf("nil CPUID Find = %+v, want nil", e)
	}
	// Find must return a pointer into Entries so callers can edit in place.
	c.Find(7, 0).EBX = 42
	if c.Entries[1].EBX != 42 {
		t.Error("Find did not return a pointer into Entries")
	}
}

func TestIRQChipTypedViews(t *testing.T) {
	var c IRQChip
	c.SetPIC(PICState{IMR: 0xfb, IRQBase: 0x20, ELCRMask: 0xf8})
	if c.Chip[2] != 0xfb || c.Chip[5] != 0x20 || c.Chip[15] != 0xf8 {
		t.Errorf("SetPIC wrote % x", c.Chip[:16])
	}
	if p := c.PIC(); p.IMR != 0xfb || p.IRQBase != 0x20 {
		t.Errorf("PIC() = %+v", p)
	}
	var io IOAPICState
	io.BaseAddress = 0xfec00000
	io.ID = 3
	io.RedirTbl[23] = 0x1_0000
	c.SetIOAPIC(io)
	if got := c.IOAPIC(); got != io {
		t.Errorf("IOAPIC() = %+v, want %+v", got, io)
	}
	// redirtbl[23] is the last 8 bytes of kvm_ioapic_state (offset 208).
	if c.Chip[208+2] != 1 {
		t.Errorf("RedirTbl[23] not at offset 208: % x", c.Chip[208:216])
	}
}
