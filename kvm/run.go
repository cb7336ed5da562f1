package kvm

import (
	"encoding/binary"
	"fmt"
)

// The kvm_run page is shared with the kernel: KVM_RUN writes the exit
// reason and its details there, and the VMM writes back the data an IN or
// an MMIO read should deliver before the next KVM_RUN. Offsets below are
// those of struct kvm_run on x86_64 (checked in types_test.go). Reads go
// through encoding/binary on the byte slice rather than through Go structs
// laid over the mapping, so a field can never be read out of bounds.
const (
	runRequestInterruptWindow = 0
	runImmediateExit          = 1
	runExitReason             = 8
	runReadyForInjection      = 12
	runIFFlag                 = 13
	runCR8                    = 16
	runAPICBase               = 24
	runExitUnion              = 32 // the per-exit-reason union, 256 bytes

	runIODirection  = runExitUnion + 0
	runIOSize       = runExitUnion + 1
	runIOPort       = runExitUnion + 2
	runIOCount      = runExitUnion + 4
	runIODataOffset = runExitUnion + 8

	runMMIOPhysAddr = runExitUnion + 0
	runMMIOData     = runExitUnion + 8
	runMMIOLen      = runExitUnion + 16
	runMMIOIsWrite  = runExitUnion + 20
	runMMIODataMax  = 8

	runFailEntryReason = runExitUnion + 0
	runFailEntryCPU    = runExitUnion + 8

	runInternalSuberror = runExitUnion + 0
	runInternalNData    = runExitUnion + 4
	runInternalData     = runExitUnion + 8
	runInternalDataMax  = 16

	runSystemEventType  = runExitUnion + 0
	runSystemEventNData = runExitUnion + 4
	runSystemEventData  = runExitUnion + 8
	runSystemEventMax   = 16

	runDebugException = runExitUnion + 0
	runDebugPC        = runExitUnion + 8
	runDebugDR6       = runExitUnion + 16
	runDebugDR7       = runExitUnion + 24

	runStructSize = 2352 // sizeof(struct kvm_run)
)

// ExitReason says why KVM_RUN returned (KVM_EXIT_*).
type ExitReason uint32

// Exit reasons an x86 VMM can see. The values are ABI.
const (
	ExitUnknown       ExitReason = 0
	ExitException     ExitReason = 1
	ExitIO            ExitReason = 2
	ExitHypercall     ExitReason = 3
	ExitDebug         ExitReason = 4
	ExitHLT           ExitReason = 5
	ExitMMIO          ExitReason = 6
	ExitIRQWindowOpen ExitReason = 7
	ExitShutdown      ExitReason = 8 // triple fault: the guest is dead
	ExitFailEntry     ExitReason = 9
	ExitIntr          ExitReason = 10 // a signal interrupted KVM_RUN
	ExitSetTPR        ExitReason = 11
	ExitTPRAccess     ExitReason = 12
	ExitNMI           ExitReason = 16
	ExitInternalError ExitReason = 17
	ExitSystemEvent   ExitReason = 24
	ExitIOAPICEOI     ExitReason = 26
	ExitHyperV        ExitReason = 27
	ExitX86RDMSR      ExitReason = 29
	ExitX86WRMSR      ExitReason = 30
	ExitDirtyRingFull ExitReason = 31
	ExitAPResetHold   ExitReason = 32
	ExitX86BusLock    ExitReason = 33
	ExitXen           ExitReason = 34
	ExitNotify        ExitReason = 37
	ExitMemoryFault   ExitReason = 39
)

var exitReasonNames = map[ExitReason]string{
	ExitUnknown:       "UNKNOWN",
	ExitException:     "EXCEPTION",
	ExitIO:            "IO",
	ExitHypercall:     "HYPERCALL",
	ExitDebug:         "DEBUG",
	ExitHLT:           "HLT",
	ExitMMIO:          "MMIO",
	ExitIRQWindowOpen: "IRQ_WINDOW_OPEN",
	ExitShutdown:      "SHUTDOWN",
	ExitFailEntry:     "FAIL_ENTRY",
	ExitIntr:          "INTR",
	ExitSetTPR:        "SET_TPR",
	ExitTPRAccess:     "TPR_ACCESS",
	ExitNMI:           "NMI",
	ExitInternalError: "INTERNAL_ERROR",
	ExitSystemEvent:   "SYSTEM_EVENT",
	ExitIOAPICEOI:     "IOAPIC_EOI",
	ExitHyperV:        "HYPERV",
	ExitX86RDMSR:      "X86_RDMSR",
	ExitX86WRMSR:      "X86_WRMSR",
	ExitDirtyRingFull: "DIRTY_RING_FULL",
	ExitAPResetHold:   "AP_RESET_HOLD",
	ExitX86BusLock:    "X86_BUS_LOCK",
	ExitXen:           "XEN",
	ExitNotify:        "NOTIFY",
	ExitMemoryFault:   "MEMORY_FAULT",
}

// String returns the KVM_EXIT_ name without the prefix, or the number.
func (r ExitReason) String() string {
	if s, ok := exitReasonNames[r]; ok {
		return s
	}
	return fmt.Sprintf("ExitReason(%d)", uint32(r))
}

// IODirection is the direction of a port I/O exit.
type IODirection uint8

// Values of IODirection (KVM_EXIT_IO_*).
const (
	IOIn  IODirection = 0 // the guest reads: the VMM fills Data
	IOOut IODirection = 1 // the guest writes: Data holds the bytes
)

func (d IODirection) String() string {
	switch d {
	case IOIn:
		return "in"
	case IOOut:
		return "out"
	}
	return fmt.Sprintf("IODirection(%d)", uint8(d))
}

// IOExit describes an ExitIO. A string instruction (rep ins/outs) exits
// once with Count > 1: Data then holds Count items of Size bytes each.
type IOExit struct {
	Direction IODirection
	Size      uint8 // bytes per item: 1, 2 or 4
	Port      uint16
	Count     uint32
	// Data aliases the kvm_run mapping: for IOOut it holds what the guest
	// wrote, for IOIn the VMM writes what the guest should read into it
	// before the next Run. It is valid until the next Run or Close.
	Data []byte
}

// MMIOExit describes an ExitMMIO: a guest access to a physical address
// backed by no memory slot (or a write to a read-only slot).
type MMIOExit struct {
	PhysAddr uint64
	// Data aliases the kvm_run mapping, len bytes: for a write it holds
	// what the guest wrote, for a read the VMM fills it before the next Run.
	Data    []byte
	IsWrite bool
}

// FailEntryExit describes an ExitFailEntry: the CPU refused to enter the
// guest, usually because of inconsistent register state.
type FailEntryExit struct {
	HardwareEntryFailureReason uint64
	CPU                        uint32
}

// Internal error sub-reasons (KVM_INTERNAL_ERROR_*).
const (
	InternalErrorEmulation            = 1 // the instruction emulator failed
	InternalErrorSimulEx              = 2 // an exception during exception delivery
	InternalErrorDeliveryEv           = 3
	InternalErrorUnexpectedExitReason = 4
)

// InternalErrorExit describes an ExitInternalError.
type InternalErrorExit struct {
	Suberror uint32
	Data     []uint64 // a copy; at most 16 words, meaning depends on Suberror
}

// System event types (KVM_SYSTEM_EVENT_*).
const (
	SystemEventShutdown = 1
	SystemEventReset    = 2
	SystemEventCrash    = 3
	SystemEventWakeup   = 4
	SystemEventSuspend  = 5
)

// SystemEventExit describes an ExitSystemEvent.
type SystemEventExit struct {
	Type uint32
	Data []uint64 // a copy; at most 16 words
}

// DebugExit describes an ExitDebug (x86 struct kvm_debug_exit_arch).
type DebugExit struct {
	Exception uint32
	PC        uint64
	DR6, DR7  uint64
}

func (v *VCPU) u8(off int) uint8   { return v.run[off] }
func (v *VCPU) u16(off int) uint16 { return binary.LittleEndian.Uint16(v.run[off:]) }
func (v *VCPU) u32(off int) uint32 { return binary.LittleEndian.Uint32(v.run[off:]) }
func (v *VCPU) u64(off int) uint64 { return binary.LittleEndian.Uint64(v.run[off:]) }

// ExitReason returns why the last Run returned.
func (v *VCPU) ExitReason() ExitReason { return ExitReason(v.u32(runExitReason)) }

// IO returns the details of an ExitIO. It fails if the exit reason is not
// ExitIO or if the kernel-provided data window does not lie inside the
// mapping (the check costs nothing and keeps a kernel bug from becoming a
// VMM memory error).
func (v *VCPU) IO() (IOExit, error) {
	if r := v.ExitReason(); r != ExitIO {
		return IOExit{}, fmt.Errorf("kvm_run.io: exit reason is %v", r)
	}
	e := IOExit{
		Direction: IODirection(v.u8(runIODirection)),
		Size:      v.u8(runIOSize),
		Port:      v.u16(runIOPort),
		Count:     v.u32(runIOCount),
	}
	off := v.u64(runIODataOffset)
	n := uint64(e.Size) * uint64(e.Count)
	if off > uint64(len(v.run)) || n > uint64(len(v.run))-off {
		return IOExit{}, fmt.Errorf("kvm_run.io: data [%#x, +%d) outside the %d-byte mapping", off, n, len(v.run))
	}
	e.Data = v.run[off : off+n : off+n]
	return e, nil
}

// MMIO returns the details of an ExitMMIO.
func (v *VCPU) MMIO() (MMIOExit, error) {
	if r := v.ExitReason(); r != ExitMMIO {
		return MMIOExit{}, fmt.Errorf("kvm_run.mmio: exit reason is %v", r)
	}
	n := v.u32(runMMIOLen)
	if n > runMMIODataMax {
		return MMIOExit{}, fmt.Errorf("kvm_run.mmio: length %d exceeds %d", n, runMMIODataMax)
	}
	return MMIOExit{
		PhysAddr: v.u64(runMMIOPhysAddr),
		Data:     v.run[runMMIOData : runMMIOData+int(n) : runMMIOData+int(n)],
		IsWrite:  v.u8(runMMIOIsWrite) != 0,
	}, nil
}

// FailEntry returns the details of an ExitFailEntry.
func (v *VCPU) FailEntry() (FailEntryExit, error) {
	if r := v.ExitReason(); r != ExitFailEntry {
		return FailEntryExit{}, fmt.Errorf("kvm_run.fail_entry: exit reason is %v", r)
	}
	return FailEntryExit{
		HardwareEntryFailureReason: v.u64(runFailEntryReason),
		CPU:                        v.u32(runFailEntryCPU),
	}, nil
}

// InternalError returns the details of an ExitInternalError.
func (v *VCPU) InternalError() (InternalErrorExit, error) {
	if r := v.ExitReason(); r != ExitInternalError {
		return InternalErrorExit{}, fmt.Errorf("kvm_run.internal: exit reason is %v", r)
	}
	n := min(int(v.u32(runInternalNData)), runInternalDataMax)
	e := InternalErrorExit{Suberror: v.u32(runInternalSuberror), Data: make([]uint64, n)}
	for i := range n {
		e.Data[i] = v.u64(runInternalData + 8*i)
	}
	return e, nil
}

// SystemEvent returns the details of an ExitSystemEvent.
func (v *VCPU) SystemEvent() (SystemEventExit, error) {
	if r := v.ExitReason(); r != ExitSystemEvent {
		return SystemEventExit{}, fmt.Errorf("kvm_run.system_event: exit reason is %v", r)
	}
	n := min(int(v.u32(runSystemEventNData)), runSystemEventMax)
	e := SystemEventExit{Type: v.u32(runSystemEventType), Data: make([]uint64, n)}
	for i := range n {
		e.Data[i] = v.u64(runSystemEventData + 8*i)
	}
	return e, nil
}

// Debug returns the details of an ExitDebug.
func (v *VCPU) Debug() (DebugExit, error) {
	if r := v.ExitReason(); r != ExitDebug {
		return DebugExit{}, fmt.Errorf("kvm_run.debug: exit reason is %v", r)
	}
	return DebugExit{
		Exception: v.u32(runDebugException),
		PC:        v.u64(runDebugPC),
		DR6:       v.u64(runDebugDR6),
		DR7:       v.u64(runDebugDR7),
	}, nil
}

// SetImmediateExit sets kvm_run.immediate_exit: while it is set, Run
// returns ErrInterrupted at once without entering the guest. A VMM sets it
// (from any goroutine) and then signals the vCPU thread, which closes the
// race where the signal arrives just before KVM_RUN starts.
func (v *VCPU) SetImmediateExit(on bool) {
	var b uint8
	if on {
		b = 1
	}
	v.run[runImmediateExit] = b
}

// SetRequestInterruptWindow asks KVM to exit with ExitIRQWindowOpen as soon
// as the guest can take an interrupt (only without an in-kernel irqchip).
func (v *VCPU) SetRequestInterruptWindow(on bool) {
	var b uint8
	if on {
		b = 1
	}
	v.run[runRequestInterruptWindow] = b
}

// ReadyForInterruptInjection reports kvm_run.ready_for_interrupt_injection.
func (v *VCPU) ReadyForInterruptInjection() bool { return v.u8(runReadyForInjection) != 0 }

// IFFlag reports the guest's RFLAGS.IF at the last exit.
func (v *VCPU) IFFlag() bool { return v.u8(runIFFlag) != 0 }

// CR8 returns kvm_run.cr8, the task priority at the last exit.
func (v *VCPU) CR8() uint64 { return v.u64(runCR8) }

// APICBase returns kvm_run.apic_base at the last exit.
func (v *VCPU) APICBase() uint64 { return v.u64(runAPICBase) }
