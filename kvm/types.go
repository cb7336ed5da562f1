package kvm

import "unsafe"

// The structs in this file mirror the x86_64 layouts in <linux/kvm.h> and
// <asm/kvm.h> field for field, so a pointer to one can be handed to an ioctl
// as is. Blank fields are the kernel's padding: they keep the offsets right
// and must stay zero. types_test.go checks every size against the kernel's.

// Regs is struct kvm_regs: the general-purpose registers, RIP and RFLAGS.
type Regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// Segment is struct kvm_segment: a segment register with its hidden
// descriptor cache, which is what the CPU actually uses once loaded.
type Segment struct {
	Base     uint64
	Limit    uint32
	Selector uint16
	Type     uint8
	Present  uint8
	DPL      uint8
	DB       uint8
	S        uint8
	L        uint8
	G        uint8
	AVL      uint8
	Unusable uint8
	_        uint8
}

// DTable is struct kvm_dtable: the GDTR or IDTR.
type DTable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

// Sregs is struct kvm_sregs: segment, descriptor-table and control registers.
type Sregs struct {
	CS, DS, ES, FS, GS, SS Segment
	TR, LDT                Segment
	GDT, IDT               DTable
	CR0, CR2, CR3, CR4     uint64
	CR8                    uint64
	EFER                   uint64
	APICBase               uint64
	// InterruptBitmap has one bit per vector of an interrupt that was
	// pending injection when the state was saved (at most one bit set).
	InterruptBitmap [4]uint64
}

// FPU is struct kvm_fpu: the legacy x87/SSE state (the FXSAVE subset).
// KVM ignores MXCSR here in both directions (KVM_GET_FPU leaves it zero,
// KVM_SET_FPU drops it; upstream behaviour): use XSave, bytes 24-27, for
// MXCSR.
type FPU struct {
	FPR        [8][16]uint8
	FCW        uint16
	FSW        uint16
	FTWX       uint8
	_          uint8
	LastOpcode uint16
	LastIP     uint64
	LastDP     uint64
	XMM        [16][16]uint8
	MXCSR      uint32
	_          uint32
}

// XSave is struct kvm_xsave: the vCPU's XSAVE area in the hardware format.
// KVM_GET_XSAVE fills the first 4096 bytes; features whose state lies beyond
// that (AMX) would need KVM_GET_XSAVE2 with a larger buffer, which this
// package does not wrap yet.
type XSave struct {
	Region [1024]uint32
}

// XCR is struct kvm_xcr: one extended control register.
type XCR struct {
	XCR   uint32
	_     uint32
	Value uint64
}

// MaxXCRs is KVM_MAX_XCRS, the capacity of XCRs.XCRs.
const MaxXCRs = 16

// XCRs is struct kvm_xcrs: the extended control registers (XCR0 is the only
// one x86 defines so far).
type XCRs struct {
	NrXCRs uint32
	Flags  uint32
	XCRs   [MaxXCRs]XCR
	_      [16]uint64
}

// LAPICState is struct kvm_lapic_state: the local APIC's 1 KiB register page
// in the layout of the xAPIC MMIO window (register at offset N*16).
type LAPICState struct {
	Regs [1024]byte
}

// MPState is struct kvm_mp_state: a vCPU's multiprocessing run state.
type MPState uint32

// Values of MPState (KVM_MP_STATE_*).
const (
	MPStateRunnable      MPState = 0
	MPStateUninitialized MPState = 1 // waiting for INIT (an AP before startup)
	MPStateInitReceived  MPState = 2
	MPStateHalted        MPState = 3
	MPStateSipiReceived  MPState = 4
)

// VCPUEvents is struct kvm_vcpu_events: pending and in-flight exceptions,
// interrupts, NMIs and SMIs — the part of a vCPU's state that is not in any
// register but must be saved for a snapshot to resume correctly.
type VCPUEvents struct {
	Exception struct {
		Injected     uint8
		Nr           uint8
		HasErrorCode uint8
		Pending      uint8
		ErrorCode    uint32
	}
	Interrupt struct {
		Injected uint8
		Nr       uint8
		Soft     uint8
		Shadow   uint8
	}
	NMI struct {
		Injected uint8
		Pending  uint8
		Masked   uint8
		_        uint8
	}
	SIPIVector uint32
	Flags      uint32
	SMI        struct {
		SMM          uint8
		Pending      uint8
		SMMInsideNMI uint8
		LatchedInit  uint8
	}
	TripleFault struct {
		Pending uint8
	}
	_                   [26]uint8
	ExceptionHasPayload uint8
	ExceptionPayload    uint64
}

// Flags of VCPUEvents.Flags (KVM_VCPUEVENT_VALID_*): on set, which optional
// parts of the struct KVM should apply.
const (
	VCPUEventValidNMIPending  = 1 << 0
	VCPUEventValidSIPIVector  = 1 << 1
	VCPUEventValidShadow      = 1 << 2
	VCPUEventValidSMM         = 1 << 3
	VCPUEventValidPayload     = 1 << 4
	VCPUEventValidTripleFault = 1 << 5
)

// DebugRegs is struct kvm_debugregs: DR0-DR3, DR6 and DR7.
type DebugRegs struct {
	DB    [4]uint64
	DR6   uint64
	DR7   uint64
	Flags uint64
	_     [9]uint64
}

// ClockData is struct kvm_clock_data: the VM's kvmclock, in nanoseconds.
type ClockData struct {
	Clock    uint64
	Flags    uint32
	_        uint32
	Realtime uint64
	HostTSC  uint64
	_        [4]uint32
}

// Flags of ClockData.Flags (KVM_CLOCK_*).
const (
	ClockTSCStable = 1 << 1
	ClockRealtime  = 1 << 2
	ClockHostTSC   = 1 << 3
)

// IRQChipID selects one of the in-kernel interrupt controllers.
type IRQChipID uint32

// Values of IRQChipID (KVM_IRQCHIP_*).
const (
	IRQChipPICMaster IRQChipID = 0
	IRQChipPICSlave  IRQChipID = 1
	IRQChipIOAPIC    IRQChipID = 2
)

// IRQChip is struct kvm_irqchip: the state of one in-kernel interrupt
// controller. Chip holds a PICState or an IOAPICState depending on ChipID;
// use the PIC/SetPIC and IOAPIC/SetIOAPIC methods to read it typed.
type IRQChip struct {
	ChipID IRQChipID
	_      uint32
	Chip   [512]byte
}

// PICState is struct kvm_pic_state: one 8259A.
type PICState struct {
	LastIRR                uint8
	IRR                    uint8
	IMR                    uint8
	ISR                    uint8
	PriorityAdd            uint8
	IRQBase                uint8
	ReadRegSelect          uint8
	Poll                   uint8
	SpecialMask            uint8
	InitState              uint8
	AutoEOI                uint8
	RotateOnAutoEOI        uint8
	SpecialFullyNestedMode uint8
	Init4                  uint8
	ELCR                   uint8
	ELCRMask               uint8
}

// IOAPICNumPins is KVM_IOAPIC_NUM_PINS.
const IOAPICNumPins = 24

// IOAPICState is struct kvm_ioapic_state. Each RedirTbl entry is the raw
// 64-bit redirection-table entry as the guest programs it.
type IOAPICState struct {
	BaseAddress uint64
	IORegSel    uint32
	ID          uint32
	IRR         uint32
	_           uint32
	RedirTbl    [IOAPICNumPins]uint64
}

// PIC returns Chip decoded as a PIC. It is only meaningful when ChipID is
// IRQChipPICMaster or IRQChipPICSlave.
func (c *IRQChip) PIC() PICState {
	return *(*PICState)(unsafe.Pointer(&c.Chip[0]))
}

// SetPIC stores s into Chip.
func (c *IRQChip) SetPIC(s PICState) {
	*(*PICState)(unsafe.Pointer(&c.Chip[0])) = s
}

// IOAPIC returns Chip decoded as an IOAPIC. It is only meaningful when
// ChipID is IRQChipIOAPIC.
func (c *IRQChip) IOAPIC() IOAPICState {
	var s IOAPICState
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s)), c.Chip[:])
	return s
}

// SetIOAPIC stores s into Chip.
func (c *IRQChip) SetIOAPIC(s IOAPICState) {
	copy(c.Chip[:], unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s)))
}

// PITChannelState is struct kvm_pit_channel_state: one 8254 counter.
type PITChannelState struct {
	Count         uint32 // 0 means 65536, as on the hardware
	LatchedCount  uint16
	CountLatched  uint8
	StatusLatched uint8
	Status        uint8
	ReadState     uint8
	WriteState    uint8
	WriteLatch    uint8
	RWMode        uint8
	Mode          uint8
	BCD           uint8
	Gate          uint8
	CountLoadTime int64
}

// PITState2 is struct kvm_pit_state2: the in-kernel 8254 PIT.
type PITState2 struct {
	Channels [3]PITChannelState
	Flags    uint32
	_        [9]uint32
}

// Flags of PITState2.Flags (KVM_PIT_FLAGS_*).
const (
	PITFlagsHPETLegacy      = 1 << 0
	PITFlagsSpeakerAttached = 1 << 1
)

// PITConfig is struct kvm_pit_config, the argument of KVM_CREATE_PIT2.
type PITConfig struct {
	Flags uint32
	_     [15]uint32
}

// PITSpeakerDummy (KVM_PIT_SPEAKER_DUMMY) makes KVM emulate a dummy PC
// speaker at port 0x61, which some guests probe during PIT calibration.
const PITSpeakerDummy = 1

// CPUIDEntry is struct kvm_cpuid_entry2: the result of CPUID for one
// (Function, Index) leaf.
type CPUIDEntry struct {
	Function uint32
	Index    uint32
	Flags    uint32
	EAX      uint32
	EBX      uint32
	ECX      uint32
	EDX      uint32
	_        [3]uint32
}

// Flags of CPUIDEntry.Flags (KVM_CPUID_FLAG_*).
const (
	// CPUIDFlagSignificantIndex means Index selects a sub-leaf (ECX input).
	CPUIDFlagSignificantIndex = 1 << 0
)

// CPUID is the Go form of struct kvm_cpuid2, whose entries are a trailing
// variable-length array in C. The wire form is built per call.
type CPUID struct {
	Entries []CPUIDEntry
}

// Find returns the entry for (function, index), or nil. For a leaf whose
// index is not significant the index is ignored, as the CPU ignores ECX.
func (c *CPUID) Find(function, index uint32) *CPUIDEntry {
	if c == nil {
		return nil
	}
	for i := range c.Entries {
		e := &c.Entries[i]
		if e.Function != function {
			continue
		}
		if e.Flags&CPUIDFlagSignificantIndex == 0 || e.Index == index {
			return e
		}
	}
	return nil
}

// MSREntry is struct kvm_msr_entry: one model-specific register.
type MSREntry struct {
	Index uint32
	_     uint32
	Data  uint64
}

// UserMemoryRegion is struct kvm_userspace_memory_region: it maps
// MemorySize bytes of the VMM's address space at UserspaceAddr into guest
// physical memory at GuestPhysAddr, as slot Slot. A MemorySize of zero
// deletes the slot.
type UserMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

// Flags of UserMemoryRegion.Flags (KVM_MEM_*).
const (
	// MemLogDirtyPages makes KVM track guest writes to the slot, read back
	// with VM.GetDirtyLog.
	MemLogDirtyPages = 1 << 0
	// MemReadonly makes guest writes to the slot exit as MMIO writes.
	MemReadonly = 1 << 1
)

// IOEventFD is struct kvm_ioeventfd: a guest write to Addr (Len bytes, and
// equal to Datamatch when IOEventFDDatamatch is set) signals FD instead of
// exiting to the VMM.
type IOEventFD struct {
	Datamatch uint64
	Addr      uint64
	Len       uint32
	FD        int32
	Flags     uint32
	_         [36]uint8
}

// Flags of IOEventFD.Flags (KVM_IOEVENTFD_FLAG_*).
const (
	IOEventFDDatamatch = 1 << 0
	IOEventFDPIO       = 1 << 1 // Addr is a port, not a physical address
	IOEventFDDeassign  = 1 << 2
)

// irqFD is struct kvm_irqfd.
type irqFD struct {
	FD         uint32
	GSI        uint32
	Flags      uint32
	ResampleFD uint32
	_          [16]uint8
}

// Flags of irqFD.Flags (KVM_IRQFD_FLAG_*).
const (
	irqFDDeassign = 1 << 0
)

// MSIRoute routes one GSI to a message-signalled interrupt: the address and
// data an MSI-capable device (or the VMM's I/O APIC) would write to the
// local APICs' window at 0xFEE00000.
type MSIRoute struct {
	GSI       uint32
	AddressLo uint32
	AddressHi uint32
	Data      uint32
}

// irqRoutingEntry is struct kvm_irq_routing_entry with its msi union member.
type irqRoutingEntry struct {
	GSI       uint32
	Type      uint32
	Flags     uint32
	_         uint32
	AddressLo uint32
	AddressHi uint32
	Data      uint32
	_         [5]uint32 // the rest of the 32-byte union
}

const (
	irqRoutingMSI = 2    // KVM_IRQ_ROUTING_MSI
	maxGSIRoutes  = 4096 // KVM_MAX_IRQ_ROUTES
)

// irqLevel is struct kvm_irq_level.
type irqLevel struct {
	IRQ   uint32
	Level uint32
}

// dirtyLog is struct kvm_dirty_log.
type dirtyLog struct {
	Slot   uint32
	_      uint32
	Bitmap *uint64 // a Go pointer, so the GC keeps the bitmap alive during the call
}

// enableCap is struct kvm_enable_cap.
type enableCap struct {
	Cap   uint32
	Flags uint32
	Args  [4]uint64
	_     [64]uint8
}

// cpuidHeader is the fixed head of struct kvm_cpuid2.
type cpuidHeader struct {
	Nent uint32
	_    uint32
}

// msrsHeader is the fixed head of struct kvm_msrs.
type msrsHeader struct {
	NMSRs uint32
	_     uint32
}

// msrListHeader is the fixed head of struct kvm_msr_list.
type msrListHeader struct {
	NMSRs uint32
}
