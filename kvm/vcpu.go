package kvm

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VCPU is one virtual CPU. Its methods must be called from a single
// goroutine at a time, and Run from a goroutine locked to its OS thread
// (runtime.LockOSThread) if the VMM kicks it with a thread-directed signal.
// SetImmediateExit is the exception: it is meant to be called from another
// goroutine.
type VCPU struct {
	id  int
	fd  int
	run []byte // the shared kvm_run mapping, VM.vcpuMmapSize bytes
}

// ErrInterrupted is returned (wrapped) by Run when KVM_RUN stopped with
// EINTR: a signal arrived for the vCPU thread, or immediate_exit was set.
// The guest state is consistent; the VMM decides whether to run again.
var ErrInterrupted = errors.New("vCPU run interrupted")

// ID returns the id the vCPU was created with.
func (v *VCPU) ID() int { return v.id }

// Fd returns the vCPU file descriptor.
func (v *VCPU) Fd() int { return v.fd }

// Close unmaps the kvm_run page and closes the vCPU fd. Slices returned by
// the exit accessors must not be used afterwards.
func (v *VCPU) Close() error {
	var errs []error
	if v.run != nil {
		if err := unix.Munmap(v.run); err != nil {
			errs = append(errs, fmt.Errorf("vCPU %d: munmap kvm_run: %w", v.id, err))
		}
		v.run = nil
	}
	if v.fd >= 0 {
		if err := unix.Close(v.fd); err != nil {
			errs = append(errs, fmt.Errorf("vCPU %d: close: %w", v.id, err))
		}
		v.fd = -1
	}
	return errors.Join(errs...)
}

// Run enters the guest until the next exit to userspace. It returns nil
// when the guest exited (see ExitReason and the exit accessors), an error
// wrapping ErrInterrupted (and unix.EINTR) when a signal or immediate_exit
// cut it short, and other errors as they come.
func (v *VCPU) Run() error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(v.fd), kvmRun, 0)
	switch errno {
	case 0:
		return nil
	case unix.EINTR:
		return fmt.Errorf("KVM_RUN: %w (%w)", ErrInterrupted, errno)
	default:
		return fmt.Errorf("KVM_RUN: %w", errno)
	}
}

// NMI injects a non-maskable interrupt (KVM_NMI).
func (v *VCPU) NMI() error {
	_, err := ioctl(v.fd, "KVM_NMI", kvmNMI, 0)
	return err
}

// EnableCap turns on a per-vCPU capability with up to four arguments.
func (v *VCPU) EnableCap(c Cap, args ...uint64) error {
	return enableCapOn(v.fd, c, args)
}

// Regs returns the general-purpose registers.
func (v *VCPU) Regs() (Regs, error) {
	var r Regs
	_, err := ioctlPtr(v.fd, "KVM_GET_REGS", kvmGetRegs, unsafe.Pointer(&r))
	return r, err
}

// SetRegs sets the general-purpose registers.
func (v *VCPU) SetRegs(r Regs) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_REGS", kvmSetRegs, unsafe.Pointer(&r))
	return err
}

// Sregs returns the segment, descriptor-table and control registers.
func (v *VCPU) Sregs() (Sregs, error) {
	var s Sregs
	_, err := ioctlPtr(v.fd, "KVM_GET_SREGS", kvmGetSregs, unsafe.Pointer(&s))
	return s, err
}

// SetSregs sets the segment, descriptor-table and control registers.
func (v *VCPU) SetSregs(s Sregs) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_SREGS", kvmSetSregs, unsafe.Pointer(&s))
	return err
}

// FPU returns the x87/SSE state.
func (v *VCPU) FPU() (FPU, error) {
	var f FPU
	_, err := ioctlPtr(v.fd, "KVM_GET_FPU", kvmGetFPU, unsafe.Pointer(&f))
	return f, err
}

// SetFPU sets the x87/SSE state.
func (v *VCPU) SetFPU(f FPU) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_FPU", kvmSetFPU, unsafe.Pointer(&f))
	return err
}

// XSave returns the XSAVE area (first 4096 bytes).
func (v *VCPU) XSave() (*XSave, error) {
	x := new(XSave)
	_, err := ioctlPtr(v.fd, "KVM_GET_XSAVE", kvmGetXSave, unsafe.Pointer(x))
	if err != nil {
		return nil, err
	}
	return x, nil
}

// SetXSave sets the XSAVE area.
func (v *VCPU) SetXSave(x *XSave) error {
	if x == nil {
		return errors.New("KVM_SET_XSAVE: nil XSave")
	}
	_, err := ioctlPtr(v.fd, "KVM_SET_XSAVE", kvmSetXSave, unsafe.Pointer(x))
	return err
}

// XCRs returns the extended control registers.
func (v *VCPU) XCRs() (XCRs, error) {
	var x XCRs
	_, err := ioctlPtr(v.fd, "KVM_GET_XCRS", kvmGetXCRs, unsafe.Pointer(&x))
	return x, err
}

// SetXCRs sets the extended control registers.
func (v *VCPU) SetXCRs(x XCRs) error {
	if x.NrXCRs > MaxXCRs {
		return fmt.Errorf("KVM_SET_XCRS: %d XCRs, at most %d", x.NrXCRs, MaxXCRs)
	}
	_, err := ioctlPtr(v.fd, "KVM_SET_XCRS", kvmSetXCRs, unsafe.Pointer(&x))
	return err
}

// LAPIC returns the in-kernel local APIC's registers (needs CreateIRQChip).
func (v *VCPU) LAPIC() (LAPICState, error) {
	var l LAPICState
	_, err := ioctlPtr(v.fd, "KVM_GET_LAPIC", kvmGetLAPIC, unsafe.Pointer(&l))
	return l, err
}

// SetLAPIC sets the in-kernel local APIC's registers.
func (v *VCPU) SetLAPIC(l LAPICState) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_LAPIC", kvmSetLAPIC, unsafe.Pointer(&l))
	return err
}

// maxMSRsPerCall is one less than the kernel's MAX_IO_MSRS (256): KVM
// refuses a kvm_msrs with that many entries or more, so longer lists (the
// whole MSRIndexList can be longer) are sent in chunks.
const maxMSRsPerCall = 255

// msrsIoctl passes entries as struct kvm_msrs, in chunks, copies back what
// KVM wrote, and fails unless KVM processed every entry: a short count
// means the MSR at the first unprocessed index was refused.
func (v *VCPU) msrsIoctl(name string, req uintptr, entries []MSREntry) error {
	for start := 0; start < len(entries); start += maxMSRsPerCall {
		chunk := entries[start:min(start+maxMSRsPerCall, len(entries))]
		// struct kvm_msrs is an 8-byte header and then the 16-byte
		// entries; a []uint64 backing keeps both 8-byte aligned.
		const headerWords = unsafe.Sizeof(msrsHeader{}) / 8
		const entryWords = unsafe.Sizeof(MSREntry{}) / 8
		buf := make([]uint64, headerWords+entryWords*uintptr(len(chunk)))
		(*msrsHeader)(unsafe.Pointer(&buf[0])).NMSRs = uint32(len(chunk))
		wire := unsafe.Slice((*MSREntry)(unsafe.Pointer(&buf[headerWords])), len(chunk))
		copy(wire, chunk)
		n, err := ioctlPtr(v.fd, name, req, unsafe.Pointer(&buf[0]))
		if err != nil {
			return err
		}
		copy(chunk, wire)
		if n < 0 || n > len(chunk) {
			return fmt.Errorf("%s: kernel processed %d of %d MSRs", name, n, len(chunk))
		}
		if n < len(chunk) {
			return fmt.Errorf("%s: MSR %#x (entry %d of %d) not accepted", name, chunk[n].Index, start+n, len(entries))
		}
	}
	return nil
}

// GetMSRs reads the MSRs with the given indices.
func (v *VCPU) GetMSRs(indices []uint32) ([]MSREntry, error) {
	entries := make([]MSREntry, len(indices))
	for i, idx := range indices {
		entries[i].Index = idx
	}
	if err := v.msrsIoctl("KVM_GET_MSRS", kvmGetMSRs, entries); err != nil {
		return nil, err
	}
	return entries, nil
}

// SetMSRs writes the given MSRs. On error, MSRs before the refused one may
// already have been written.
func (v *VCPU) SetMSRs(entries []MSREntry) error {
	tmp := append([]MSREntry(nil), entries...) // the ioctl buffer is ours, not the caller's
	return v.msrsIoctl("KVM_SET_MSRS", kvmSetMSRs, tmp)
}

// SetCPUID sets what CPUID returns in the guest (KVM_SET_CPUID2). It must
// be called before the first Run. Success does not mean KVM kept every
// entry as given: it may drop leaves (an AMX host dropped its own supported
// 0x1d/0x1e) and keeps some bits up to date itself, so CPUID reads back what
// the vCPU really has.
func (v *VCPU) SetCPUID(c *CPUID) error {
	if c == nil {
		return errors.New("KVM_SET_CPUID2: nil CPUID")
	}
	if len(c.Entries) > maxCPUIDEntries {
		return fmt.Errorf("KVM_SET_CPUID2: %d entries, at most %d", len(c.Entries), maxCPUIDEntries)
	}
	_, err := cpuidIoctl(v.fd, "KVM_SET_CPUID2", kvmSetCPUID2, c.Entries)
	return err
}

// unwrittenCPUIDEntry marks the slots of a KVM_GET_CPUID2 buffer that KVM
// did not fill: no leaf has every register and flag bit set.
var unwrittenCPUIDEntry = CPUIDEntry{Function: ^uint32(0), Index: ^uint32(0), Flags: ^uint32(0),
	EAX: ^uint32(0), EBX: ^uint32(0), ECX: ^uint32(0), EDX: ^uint32(0)}

// CPUID returns the vCPU's CPUID table (KVM_GET_CPUID2).
func (v *VCPU) CPUID() (*CPUID, error) {
	// KVM answers E2BIG without saying how many it needs; KVM_MAX_CPUID_ENTRIES
	// is 256, so one try normally suffices.
	//
	// Linux 6.1 (the box's kernel, Debian 12's) leaves nent as the caller
	// gave it when the call succeeds (it sets nent only on an error), while
	// the 6.18 hosts here set it; so the buffer may come back with
	// the vCPU's entries followed by whatever it held: fill it with an
	// entry KVM never writes and drop those from the end.
	for n := 256; n <= maxCPUIDEntries; n *= 2 {
		buf := make([]CPUIDEntry, n)
		for i := range buf {
			buf[i] = unwrittenCPUIDEntry
		}
		c, err := cpuidIoctl(v.fd, "KVM_GET_CPUID2", kvmGetCPUID2, buf)
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for len(c.Entries) > 0 && c.Entries[len(c.Entries)-1] == unwrittenCPUIDEntry {
			c.Entries = c.Entries[:len(c.Entries)-1]
		}
		return c, nil
	}
	return nil, fmt.Errorf("KVM_GET_CPUID2: more than %d entries: %w", maxCPUIDEntries, unix.E2BIG)
}

// MPState returns the vCPU's multiprocessing state.
func (v *VCPU) MPState() (MPState, error) {
	var s MPState
	_, err := ioctlPtr(v.fd, "KVM_GET_MP_STATE", kvmGetMPState, unsafe.Pointer(&s))
	return s, err
}

// SetMPState sets the vCPU's multiprocessing state.
func (v *VCPU) SetMPState(s MPState) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_MP_STATE", kvmSetMPState, unsafe.Pointer(&s))
	return err
}

// VCPUEvents returns pending exception/interrupt/NMI/SMI state.
func (v *VCPU) VCPUEvents() (VCPUEvents, error) {
	var e VCPUEvents
	_, err := ioctlPtr(v.fd, "KVM_GET_VCPU_EVENTS", kvmGetVCPUEvents, unsafe.Pointer(&e))
	return e, err
}

// SetVCPUEvents restores pending event state; e.Flags says which optional
// parts KVM should apply.
func (v *VCPU) SetVCPUEvents(e VCPUEvents) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_VCPU_EVENTS", kvmSetVCPUEvents, unsafe.Pointer(&e))
	return err
}

// DebugRegs returns DR0-3, DR6 and DR7.
func (v *VCPU) DebugRegs() (DebugRegs, error) {
	var d DebugRegs
	_, err := ioctlPtr(v.fd, "KVM_GET_DEBUGREGS", kvmGetDebugRegs, unsafe.Pointer(&d))
	return d, err
}

// SetDebugRegs sets DR0-3, DR6 and DR7. Flags must be zero.
func (v *VCPU) SetDebugRegs(d DebugRegs) error {
	_, err := ioctlPtr(v.fd, "KVM_SET_DEBUGREGS", kvmSetDebugRegs, unsafe.Pointer(&d))
	return err
}

// TSCKHz returns the guest TSC frequency in kHz.
func (v *VCPU) TSCKHz() (uint32, error) {
	khz, err := ioctl(v.fd, "KVM_GET_TSC_KHZ", kvmGetTSCKHz, 0)
	if err != nil {
		return 0, err
	}
	return uint32(khz), nil
}

// SetTSCKHz sets the guest TSC frequency (needs CapTSCControl, and TSC
// scaling in hardware unless khz is the host's frequency).
func (v *VCPU) SetTSCKHz(khz uint32) error {
	_, err := ioctl(v.fd, "KVM_SET_TSC_KHZ", kvmSetTSCKHz, uintptr(khz))
	return err
}

// KVMClockCtrl tells the guest (through its kvmclock page) that the VMM
// paused it, so its soft-lockup watchdog does not fire on resume.
func (v *VCPU) KVMClockCtrl() error {
	_, err := ioctl(v.fd, "KVM_KVMCLOCK_CTRL", kvmKVMClockCtrl, 0)
	return err
}
