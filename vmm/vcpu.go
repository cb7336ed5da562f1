package vmm

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/smolvm/smol/kvm"
	"golang.org/x/sys/unix"
)

// vcpu is one virtual CPU and the goroutine that runs it.
//
// The goroutine locks itself to its OS thread for its whole life: KVM ties a
// vCPU to the thread that runs it (its register cache, its signal mask), and
// the stop path interrupts KVM_RUN by signalling exactly that thread.
type vcpu struct {
	index   int
	fd      *kvm.VCPU
	machine *Machine
	tid     atomic.Int32 // OS thread running KVM_RUN; 0 before it starts

	// exits counts this vCPU's exits to the VMM by kind and address. Only
	// the vCPU's goroutine writes it; it is read after the vCPU stopped.
	exits map[exitKey]uint64
	// entries counts KVM_RUN calls and inGuest is true during one, for
	// GuestActivity: a vCPU whose thread neither enters KVM_RUN nor sits
	// in it is held up in the VMM.
	entries atomic.Uint64
	inGuest atomic.Bool
}

// exitKey names one kind of exit: a port, an MMIO address, or another reason.
type exitKey struct {
	reason kvm.ExitReason
	addr   uint64
}

// run is the vCPU loop: enter the guest, handle the exit, repeat until the
// machine stops. It returns nil when the vCPU stopped because the machine is
// stopping, and the reason otherwise.
func (v *vcpu) run() (reason StopReason, err error) {
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	v.tid.Store(int32(unix.Gettid()))
	m := v.machine
	if v.index == 0 {
		m.firstRun.Store(time.Now().UnixNano())
		trace("first KVM_RUN")
	}
	for {
		// Every exit is re-entered: KVM completes a pending port or MMIO
		// read only on the next KVM_RUN. A stop sets immediate_exit first,
		// so that entry finishes the access and returns at once, and the
		// vCPU's state is consistent when the loop leaves.
		v.entries.Add(1)
		v.inGuest.Store(true)
		err := v.fd.Run()
		v.inGuest.Store(false)
		if errors.Is(err, kvm.ErrInterrupted) {
			if m.stopping.Load() {
				return StopRequested, nil
			}
			if m.wantsPark() && !v.park() {
				return StopRequested, nil
			}
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			// An application processor waiting for its startup IPI was
			// woken but is not runnable yet: KVM asks to be called again.
			continue
		}
		if err != nil {
			return StopCrash, v.crash(fmt.Sprintf("KVM_RUN failed: %v", err))
		}
		reason := v.fd.ExitReason()
		switch reason {
		case kvm.ExitIO:
			io, err := v.fd.IO()
			if err != nil {
				return StopCrash, v.crash(err.Error())
			}
			v.exits[exitKey{reason, uint64(io.Port)}]++
			v.handleIO(io)
		case kvm.ExitMMIO:
			mmio, err := v.fd.MMIO()
			if err != nil {
				return StopCrash, v.crash(err.Error())
			}
			v.exits[exitKey{reason, mmio.PhysAddr}]++
			if mmio.IsWrite {
				m.mmio.Write(mmio.PhysAddr, mmio.Data)
			} else {
				m.mmio.Read(mmio.PhysAddr, mmio.Data)
			}
		case kvm.ExitIntr:
			v.exits[exitKey{reason, 0}]++
			if m.stopping.Load() {
				return StopRequested, nil
			}
			if m.wantsPark() && !v.park() {
				return StopRequested, nil
			}
		case kvm.ExitIOAPICEOI:
			// The guest ended a level-triggered interrupt of the split
			// irqchip's I/O APIC. Its line was a pulse (an irqfd write)
			// and is low again, so there is nothing to deliver anew.
			v.exits[exitKey{reason, 0}]++
		case kvm.ExitSystemEvent:
			event, err := v.fd.SystemEvent()
			if err != nil {
				return StopCrash, v.crash(err.Error())
			}
			switch event.Type {
			case kvm.SystemEventShutdown:
				return StopPoweroff, nil
			case kvm.SystemEventReset:
				return StopReboot, nil
			default:
				return StopCrash, v.crash("guest reported a crash")
			}
		case kvm.ExitShutdown:
			// A triple fault: the guest hit an exception it could not
			// handle (garbage code, a broken kernel, no IDT yet).
			return StopCrash, v.crash("guest triple-faulted (shutdown exit)")
		case kvm.ExitHLT:
			// With the in-kernel local APIC KVM handles HLT itself; an HLT
			// exit means interrupts can never wake this vCPU again.
			return StopCrash, v.crash("guest halted with no way to wake up")
		case kvm.ExitFailEntry:
			fe, _ := v.fd.FailEntry()
			return StopCrash, v.crash(fmt.Sprintf("KVM could not enter the guest (hardware entry failure reason %#x)", fe.HardwareEntryFailureReason))
		case kvm.ExitInternalError:
			ie, _ := v.fd.InternalError()
			return StopCrash, v.crash(fmt.Sprintf("KVM internal error (suberror %d): the guest ran something KVM cannot emulate", ie.Suberror))
		default:
			return StopCrash, v.crash(fmt.Sprintf("unexpected vCPU exit %v", reason))
		}
	}
}

// handleIO performs a port access, including string I/O (count > 1).
func (v *vcpu) handleIO(io kvm.IOExit) {
	bus, size := v.machine.pio, int(io.Size)
	for i := 0; i < int(io.Count); i++ {
		chunk := io.Data[i*size : (i+1)*size]
		if io.Direction == kvm.IOOut {
			bus.Write(uint64(io.Port), chunk)
		} else {
			bus.Read(uint64(io.Port), chunk)
		}
	}
}

// kick makes the vCPU leave KVM_RUN (or not enter it again) promptly.
func (v *vcpu) kick() {
	v.fd.SetImmediateExit(true)
	if tid := v.tid.Load(); tid != 0 {
		// SIGURG is the Go runtime's own preemption signal: its handler is
		// installed and harmless, and its arrival makes KVM_RUN return EINTR.
		unix.Tgkill(unix.Getpid(), int(tid), unix.SIGURG)
	}
}

// CrashError describes a guest that stopped abnormally, with the vCPU's
// registers so that a kernel developer can see where.
type CrashError struct {
	VCPU   int // -1 when no one vCPU is to blame (a reported kernel panic)
	What   string
	Regs   kvm.Regs
	Sregs  kvm.Sregs
	HasReg bool
}

func (e *CrashError) Error() string {
	if e.VCPU < 0 {
		return e.What
	}
	if !e.HasReg {
		return fmt.Sprintf("vCPU %d: %s", e.VCPU, e.What)
	}
	r, s := e.Regs, e.Sregs
	return fmt.Sprintf("vCPU %d: %s: rip=%#x rsp=%#x rflags=%#x rax=%#x rbx=%#x rcx=%#x rdx=%#x rsi=%#x rdi=%#x cs=%#x cr0=%#x cr2=%#x cr3=%#x cr4=%#x efer=%#x",
		e.VCPU, e.What, r.RIP, r.RSP, r.RFLAGS, r.RAX, r.RBX, r.RCX, r.RDX, r.RSI, r.RDI, s.CS.Selector, s.CR0, s.CR2, s.CR3, s.CR4, s.EFER)
}

func (v *vcpu) crash(what string) error {
	e := &CrashError{VCPU: v.index, What: what}
	regs, err1 := v.fd.Regs()
	sregs, err2 := v.fd.Sregs()
	if err1 == nil && err2 == nil {
		e.Regs, e.Sregs, e.HasReg = regs, sregs, true
	}
	return e
}
