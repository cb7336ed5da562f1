package vmm

import (
	"errors"
	"sync"
)

// Pause is a first-class state: every vCPU parked outside KVM_RUN, its
// last exit completed, until Resume.
//
// Parking reuses the stop path's mechanism: kick sets immediate_exit and
// signals the vCPU thread, so KVM_RUN finishes any pending port or MMIO
// access and returns at once; the loop then parks instead of re-entering.
// The register state of a parked vCPU is therefore consistent (what a
// snapshot will read). Once every vCPU is parked, every device's worker is
// parked too (virtio.Lifecycle), between requests: its queue positions are
// stable and readable without races, it touches no guest memory, and what
// host sockets send meanwhile waits in them. Resume wakes the devices
// first, then the vCPUs, so the guest finds its devices running.
//
// Lock order: pauser.mu is taken by Pause/Resume and by a vCPU parking;
// kick and clearing immediate_exit both happen under it, so a Resume
// followed at once by a Pause can never leave a vCPU running with its
// kick lost.
type pauser struct {
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool // requested
	parked int  // vCPUs waiting in park
	// closed: Close is releasing the vCPUs, devices and memory that
	// Pause and Resume touch; both refuse from then on.
	closed bool
}

// ErrNotRunning says the machine has not started or has stopped.
var ErrNotRunning = errors.New("the machine is not running")

// Pause parks every vCPU and returns once all are parked. Pausing a
// paused machine does nothing.
func (m *Machine) Pause() error {
	p := &m.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !m.isRunning() {
		return ErrNotRunning
	}
	if p.paused {
		return nil
	}
	p.paused = true
	for _, v := range m.vcpus {
		v.kick()
	}
	for p.parked < len(m.vcpus) && !m.stopping.Load() {
		p.cond.Wait()
	}
	if m.stopping.Load() {
		return ErrNotRunning
	}
	for _, vd := range m.virtio {
		vd.transport.Pause()
	}
	return nil
}

// Resume lets parked vCPUs run again and returns once all are back in
// the guest's hands.
func (m *Machine) Resume() error {
	p := &m.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrNotRunning
	}
	if !p.paused {
		return nil
	}
	for _, vd := range m.virtio {
		vd.transport.Resume()
	}
	// From here the guest writes its RAM again: a frozen fork point no
	// longer holds its contents, so the next fork freezes anew.
	m.mem.Thaw()
	m.tellGuestItWasPaused()
	p.paused = false
	p.cond.Broadcast()
	for p.parked > 0 && !m.stopping.Load() {
		p.cond.Wait()
	}
	return nil
}

// Paused tells whether the machine is paused.
func (m *Machine) Paused() bool {
	m.pause.mu.Lock()
	defer m.pause.mu.Unlock()
	return m.pause.paused
}

func (m *Machine) isRunning() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started && !m.stopping.Load()
}

// wakeParked releases parked vCPUs when the machine stops.
func (m *Machine) wakeParked() {
	m.pause.mu.Lock()
	m.pause.cond.Broadcast()
	m.pause.mu.Unlock()
}

// park holds the vCPU while the machine is paused. It returns false when
// the machine is stopping instead.
func (v *vcpu) park() bool {
	m := v.machine
	p := &m.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked++
	p.cond.Broadcast()
	for p.paused && !m.stopping.Load() {
		p.cond.Wait()
	}
	p.parked--
	p.cond.Broadcast()
	if m.stopping.Load() {
		return false
	}
	v.fd.SetImmediateExit(false)
	return true
}

// wantsPark tells whether the vCPU should park now.
func (m *Machine) wantsPark() bool {
	m.pause.mu.Lock()
	defer m.pause.mu.Unlock()
	return m.pause.paused
}

// tellGuestItWasPaused sets the "stopped by the host" flag in each vCPU's
// kvmclock page (KVM_KVMCLOCK_CTRL) before the vCPUs run again, so that a
// Linux guest paused for longer than its watchdog's threshold does not
// report soft lockups on resume. A guest that has not enabled kvmclock
// (no Linux yet, or a tiny test guest) makes KVM answer EINVAL: nothing
// to tell it.
func (m *Machine) tellGuestItWasPaused() {
	for _, v := range m.vcpus {
		v.fd.KVMClockCtrl()
	}
}
