package virtio

import "fmt"

// writeStatus applies a driver write to the Status register: 0 resets the
// device; otherwise the driver may only add bits, in the order of the
// initialisation sequence (virtio 1.2, section 3.1.1):
//
//	ACKNOWLEDGE → DRIVER → FEATURES_OK → DRIVER_OK, FAILED at any time.
//
// A write that clears a bit, or adds one out of order, keeps only the bits
// it may add. FEATURES_OK is refused (left clear, which is how the driver
// learns it) when the driver accepted a feature that was not offered or did
// not accept VERSION_1. DRIVER_OK activates the device; if that fails the
// device shows DEVICE_NEEDS_RESET and signals a configuration change.
// DEVICE_NEEDS_RESET itself is the device's to set: the driver cannot set
// or clear it.
func (m *MMIO) writeStatus(v uint32) {
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	if v == 0 {
		m.resetLocked()
		return
	}

	m.mu.Lock()
	old := m.status
	v = v&^StatusNeedsReset | old&StatusNeedsReset
	if old&^v != 0 {
		m.mu.Unlock()
		return
	}
	next := old
	added := v &^ old
	if added&StatusAcknowledge != 0 {
		next |= StatusAcknowledge
	}
	if added&StatusDriver != 0 && next&StatusAcknowledge != 0 {
		next |= StatusDriver
	}
	if added&StatusFeaturesOK != 0 && next&StatusDriver != 0 && m.featuresAcceptable() {
		next |= StatusFeaturesOK
	}
	if added&StatusFailed != 0 {
		next |= StatusFailed
	}
	activate := added&StatusDriverOK != 0 && next&StatusFeaturesOK != 0 &&
		next&(StatusFailed|StatusNeedsReset) == 0
	m.status = next
	if !activate {
		m.mu.Unlock()
		return
	}
	env, err := m.prepareActivation()
	m.mu.Unlock()

	if err == nil {
		err = m.dev.Activate(env)
		if err != nil {
			// Leave the device stopped whatever state Activate left.
			m.dev.Reset()
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.running, m.notifiable, m.live = false, false, nil
		m.status |= StatusNeedsReset
		m.configGeneration++
		m.interruptStatus |= InterruptConfigChange
		_ = m.trigger() // nothing more to do if the line cannot be raised
		return
	}
	m.status |= StatusDriverOK
	m.notifiable = true
}

// featuresAcceptable reports whether the driver's features are a subset of
// the offered ones and include VERSION_1 (this transport has no legacy
// interface); mu held.
func (m *MMIO) featuresAcceptable() bool {
	return m.driverFeatures&^m.offered == 0 && m.driverFeatures&FeatureVersion1 != 0
}

// prepareActivation builds the device's queues from the registers the
// driver wrote and marks the device running so it may signal interrupts
// while Activate is still in progress; mu held.
func (m *MMIO) prepareActivation() (Env, error) {
	live := make([]*Queue, len(m.queues))
	for i, regs := range m.queues {
		if !regs.Ready {
			continue
		}
		if regs.Size > m.queueMax[i] {
			return Env{}, fmt.Errorf("%w: queue %d size %d exceeds its maximum %d", ErrInvalidQueue, i, regs.Size, m.queueMax[i])
		}
		st := regs
		st.NextAvail, st.NextUsed, st.SignalledUsed, st.Broken = 0, 0, 0, false
		st.EventIdx = m.driverFeatures&FeatureRingEventIdx != 0
		st.IndirectDesc = m.driverFeatures&FeatureRingIndirectDesc != 0
		q, err := NewQueue(m.mem, st)
		if err != nil {
			return Env{}, fmt.Errorf("queue %d: %w", i, err)
		}
		live[i] = q
	}
	m.live = live
	m.running = true
	return Env{Mem: m.mem, Features: m.driverFeatures, Queues: live, Interrupt: m}, nil
}

// Reset returns the transport and the device to their initial state, as a
// driver write of 0 to Status does; the VMM calls it when the VM stops.
func (m *MMIO) Reset() {
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.resetLocked()
}

// Pauser is a device whose worker can be parked with its queues stable:
// every device built on Lifecycle is one.
type Pauser interface {
	Pause()
	Resume()
}

// Pause parks the device's worker between requests, so that its queue
// positions and state can be read without racing it (a snapshot) and it
// does no work while the VM stands still. The VMM pauses devices after
// every vCPU is parked, so the driver cannot add work meanwhile;
// notifications that still arrive wait for Resume.
func (m *MMIO) Pause() {
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	if p, ok := m.dev.(Pauser); ok {
		p.Pause()
	}
}

// Resume lets a paused device's worker continue where it stopped.
func (m *MMIO) Resume() {
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	if p, ok := m.dev.(Pauser); ok {
		p.Resume()
	}
}

// resetLocked resets registers and then the device; lifecycle held. The
// device is reset after mu is released because its Reset waits for its
// goroutine, which may be blocked in SignalUsed on mu; signals it sends in
// between are dropped because running is already false. ConfigGeneration
// survives the reset so a driver never sees an old generation again.
func (m *MMIO) resetLocked() {
	m.mu.Lock()
	m.resetRegisters()
	m.mu.Unlock()
	m.dev.Reset()
}
