package virtio

import (
	"errors"
	"fmt"
)

// ErrBadState reports transport state that does not fit the device it is
// restored onto.
var ErrBadState = errors.New("virtio-mmio: state does not match the device")

// MMIOState is the transport's part of a device snapshot: its registers and
// its queues. Device-specific state is saved by the device.
type MMIOState struct {
	DeviceFeaturesSel uint32
	DriverFeaturesSel uint32
	DriverFeatures    uint64
	QueueSel          uint32
	Status            uint32
	ConfigGeneration  uint32
	InterruptStatus   uint32
	// Queues has one entry per device queue: the driver's configuration
	// and, while the device runs, its ring positions.
	Queues []QueueState
}

// State captures the transport. The VMM calls it with the VM paused and
// the device quiesced (its goroutine owns the live queues' positions).
func (m *MMIO) State() MMIOState {
	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := MMIOState{
		DeviceFeaturesSel: m.deviceFeaturesSel,
		DriverFeaturesSel: m.driverFeaturesSel,
		DriverFeatures:    m.driverFeatures,
		QueueSel:          m.queueSel,
		Status:            m.status,
		ConfigGeneration:  m.configGeneration,
		InterruptStatus:   m.interruptStatus,
		Queues:            append([]QueueState(nil), m.queues...),
	}
	for i, q := range m.live {
		if q != nil {
			st.Queues[i] = q.State()
		}
	}
	return st
}

// Restore loads a captured state into the transport, after the VMM restored
// the device's own state. A running device is reset first. If the state
// says DRIVER_OK, the queues are rebuilt at their saved positions and the
// device is activated with them, so the guest continues where it stopped,
// and an interrupt still unacknowledged is raised again.
func (m *MMIO) Restore(st MMIOState) error {
	if len(st.Queues) != len(m.queueMax) {
		return fmt.Errorf("%w: %d queues saved, device has %d", ErrBadState, len(st.Queues), len(m.queueMax))
	}
	for i, q := range st.Queues {
		if q.Size > m.queueMax[i] {
			return fmt.Errorf("%w: queue %d size %d exceeds its maximum %d", ErrBadState, i, q.Size, m.queueMax[i])
		}
	}
	if st.DriverFeatures&^m.offered != 0 {
		return fmt.Errorf("%w: driver features %#x were not offered (%#x)", ErrBadState, st.DriverFeatures, m.offered)
	}

	m.lifecycle.Lock()
	defer m.lifecycle.Unlock()
	m.resetLocked()

	running := st.Status&StatusDriverOK != 0 && st.Status&StatusNeedsReset == 0
	var live []*Queue
	if running {
		live = make([]*Queue, len(st.Queues))
		for i, qs := range st.Queues {
			if !qs.Ready {
				continue
			}
			q, err := NewQueue(m.mem, qs)
			if err != nil {
				return fmt.Errorf("restore queue %d: %w", i, err)
			}
			live[i] = q
		}
	}

	m.mu.Lock()
	m.deviceFeaturesSel = st.DeviceFeaturesSel
	m.driverFeaturesSel = st.DriverFeaturesSel
	m.driverFeatures = st.DriverFeatures
	m.queueSel = st.QueueSel
	m.status = st.Status
	m.configGeneration = st.ConfigGeneration
	m.interruptStatus = st.InterruptStatus
	copy(m.queues, st.Queues)
	if !running {
		m.mu.Unlock()
		return nil
	}
	m.live = live
	m.running = true
	env := Env{Mem: m.mem, Features: m.driverFeatures, Queues: live, Interrupt: m}
	m.mu.Unlock()

	if err := m.dev.Activate(env); err != nil {
		m.dev.Reset()
		m.mu.Lock()
		m.resetRegisters()
		m.mu.Unlock()
		return fmt.Errorf("restore: activate %v device: %w", m.dev.ID(), err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notifiable = true
	// An interrupt the driver has not acknowledged is raised again: the
	// snapshot may have caught its edge on the way (KVM injects an
	// irqfd's edge into its I/O APIC from a worker thread, after the
	// eventfd write), in no interrupt controller's state, and a driver
	// that suppresses interrupts with event indexes would then wait for
	// it forever. If the edge was already pending, the driver's handler
	// runs once more, finds nothing new and returns.
	if m.interruptStatus != 0 {
		return m.trigger()
	}
	return nil
}
