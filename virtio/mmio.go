package virtio

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/smolvm/smol/devices"
)

// virtio-mmio version 2 layout (virtio 1.2, section 4.2.2).
const (
	// MMIOWindowSize is the guest-physical window the VMM reserves per
	// device (registers at 0, config space at ConfigOffset).
	MMIOWindowSize = 0x1000
	// NotifyOffset is the QueueNotify register. The VMM registers a KVM
	// ioeventfd there (4 bytes, datamatch = queue index) so that
	// notifications do not exit to the VMM's vCPU loop, and calls
	// QueueNotify from its eventfd poller.
	NotifyOffset = 0x50
	// ConfigOffset is where the device-specific configuration space starts.
	ConfigOffset = 0x100

	// MMIOMagic is "virt" in little-endian.
	MMIOMagic = 0x74726976
	// MMIOVersion is the non-legacy virtio-mmio interface.
	MMIOVersion = 2
	// VendorID identifies smol's devices to the guest: "SMOL" read as a
	// little-endian 32-bit value. Linux only displays it.
	VendorID = 0x4c4f4d53
)

// Register offsets below ConfigOffset.
const (
	regMagicValue        = 0x000
	regVersion           = 0x004
	regDeviceID          = 0x008
	regVendorID          = 0x00c
	regDeviceFeatures    = 0x010
	regDeviceFeaturesSel = 0x014
	regDriverFeatures    = 0x020
	regDriverFeaturesSel = 0x024
	regQueueSel          = 0x030
	regQueueNumMax       = 0x034
	regQueueNum          = 0x038
	regQueueReady        = 0x044
	regQueueNotify       = NotifyOffset
	regInterruptStatus   = 0x060
	regInterruptACK      = 0x064
	regStatus            = 0x070
	regQueueDescLow      = 0x080
	regQueueDescHigh     = 0x084
	regQueueDriverLow    = 0x090
	regQueueDriverHigh   = 0x094
	regQueueDeviceLow    = 0x0a0
	regQueueDeviceHigh   = 0x0a4
	regSHMSel            = 0x0ac
	regSHMLenLow         = 0x0b0
	regSHMLenHigh        = 0x0b4
	regSHMBaseLow        = 0x0b8
	regSHMBaseHigh       = 0x0bc
	regConfigGeneration  = 0x0fc
)

// Device status bits (virtio 1.2, section 2.1).
const (
	StatusAcknowledge = 1
	StatusDriver      = 2
	StatusDriverOK    = 4
	StatusFeaturesOK  = 8
	StatusNeedsReset  = 0x40
	StatusFailed      = 0x80
)

// InterruptStatus bits.
const (
	InterruptUsedBuffer   = 1
	InterruptConfigChange = 2
)

// transportFeatures are the device-independent features the transport
// offers for every device; reservedFeatures (bits 24-49) are the ones a
// device may not offer itself.
const (
	transportFeatures = FeatureVersion1 | FeatureRingIndirectDesc | FeatureRingEventIdx
	reservedFeatures  = (1<<50 - 1) &^ (1<<24 - 1)
)

// MMIO is the virtio-mmio transport of one device: a devices.Device for the
// device's register window, and the Interrupter the device signals through.
//
// Locking. Registers are accessed from any vCPU thread, notifications come
// from an ioeventfd poller, and the device's goroutines call SignalUsed and
// SignalConfigChange. Two mutexes, always taken in this order:
//
//  1. lifecycle serialises the calls that start and stop the device
//     (Activate on DRIVER_OK, Reset on a status write of 0, Restore, Reset),
//     so a reset can never overtake an activation in progress.
//  2. mu guards the register state. It is never held while calling into the
//     device (Activate, Reset, Notify, ReadConfig, WriteConfig), because the
//     device calls back into SignalUsed, which takes mu: holding it across
//     Reset, which waits for the device's goroutine, would deadlock. It is
//     held while calling the devices.Interrupt, which never calls back.
//
// The device's own locks are below both: the transport may call the device
// while holding lifecycle, so a device must not call anything that takes
// lifecycle (only register writes and Reset/Restore do).
type MMIO struct {
	dev      Device
	mem      Memory
	irq      devices.Interrupt
	queueMax []uint16
	offered  uint64

	lifecycle sync.Mutex

	mu                sync.Mutex
	deviceFeaturesSel uint32
	driverFeaturesSel uint32
	driverFeatures    uint64
	queueSel          uint32
	status            uint32
	configGeneration  uint32
	interruptStatus   uint32
	queues            []QueueState // registers as the driver wrote them
	// running is true from just before Activate until reset: the device
	// may signal interrupts. notifiable is true once Activate succeeded:
	// notifications reach the device.
	running    bool
	notifiable bool
	live       []*Queue // the queues handed to the device (nil entries for disabled ones)
}

var _ devices.Device = (*MMIO)(nil)
var _ Interrupter = (*MMIO)(nil)

// NewMMIO wraps dev in a virtio-mmio transport over guest memory mem,
// raising irq for its interrupts.
func NewMMIO(dev Device, mem Memory, irq devices.Interrupt) *MMIO {
	m := &MMIO{
		dev:      dev,
		mem:      mem,
		irq:      irq,
		queueMax: append([]uint16(nil), dev.QueueSizes()...),
		offered:  dev.Features()&^reservedFeatures | transportFeatures,
	}
	m.queues = make([]QueueState, len(m.queueMax))
	m.resetRegisters()
	return m
}

// Device returns the device behind the transport.
func (m *MMIO) Device() Device { return m.dev }

// OfferedFeatures returns the features the transport offers the driver.
func (m *MMIO) OfferedFeatures() uint64 { return m.offered }

// resetRegisters returns every register to its power-on value; mu held (or
// the transport not yet shared).
func (m *MMIO) resetRegisters() {
	m.deviceFeaturesSel, m.driverFeaturesSel, m.driverFeatures, m.queueSel = 0, 0, 0, 0
	m.status, m.interruptStatus = 0, 0
	m.running, m.notifiable, m.live = false, false, nil
	for i := range m.queues {
		m.queues[i] = QueueState{Size: m.queueMax[i]}
	}
}

// Read implements devices.Device. Registers below ConfigOffset accept only
// aligned 32-bit reads (others read as 0, as the spec leaves them
// undefined); config space accepts 1, 2, 4 and 8-byte reads.
func (m *MMIO) Read(offset uint64, data []byte) {
	clear(data)
	if offset >= ConfigOffset {
		if offset < MMIOWindowSize && validConfigWidth(len(data)) {
			m.dev.ReadConfig(offset-ConfigOffset, data)
		}
		return
	}
	if len(data) != 4 || offset%4 != 0 {
		return
	}
	binary.LittleEndian.PutUint32(data, m.readRegister(offset))
}

// Write implements devices.Device with the same width rules as Read.
func (m *MMIO) Write(offset uint64, data []byte) {
	if offset >= ConfigOffset {
		if offset < MMIOWindowSize && validConfigWidth(len(data)) {
			m.dev.WriteConfig(offset-ConfigOffset, data)
		}
		return
	}
	if len(data) != 4 || offset%4 != 0 {
		return
	}
	v := binary.LittleEndian.Uint32(data)
	switch offset {
	case regStatus:
		m.writeStatus(v)
	case regQueueNotify:
		m.QueueNotify(int(v))
	default:
		m.writeRegister(offset, v)
	}
}

func validConfigWidth(n int) bool { return n == 1 || n == 2 || n == 4 || n == 8 }

func (m *MMIO) readRegister(offset uint64) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch offset {
	case regMagicValue:
		return MMIOMagic
	case regVersion:
		return MMIOVersion
	case regDeviceID:
		return uint32(m.dev.ID())
	case regVendorID:
		return VendorID
	case regDeviceFeatures:
		switch m.deviceFeaturesSel {
		case 0:
			return uint32(m.offered)
		case 1:
			return uint32(m.offered >> 32)
		}
		return 0
	case regQueueNumMax:
		if int(m.queueSel) < len(m.queueMax) {
			return uint32(m.queueMax[m.queueSel])
		}
		return 0
	case regQueueReady:
		if int(m.queueSel) < len(m.queues) && m.queues[m.queueSel].Ready {
			return 1
		}
		return 0
	case regInterruptStatus:
		return m.interruptStatus
	case regStatus:
		return m.status
	case regSHMLenLow, regSHMLenHigh, regSHMBaseLow, regSHMBaseHigh:
		// No shared memory regions: all ones means "no such region".
		return 0xffffffff
	case regConfigGeneration:
		return m.configGeneration
	}
	return 0 // write-only and reserved registers
}

func (m *MMIO) writeRegister(offset uint64, v uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch offset {
	case regDeviceFeaturesSel:
		m.deviceFeaturesSel = v
	case regDriverFeaturesSel:
		m.driverFeaturesSel = v
	case regDriverFeatures:
		// Features are frozen once FEATURES_OK is set; banks above 1 hold
		// no features and must be written as 0, so they are ignored.
		if m.status&StatusFeaturesOK != 0 {
			return
		}
		switch m.driverFeaturesSel {
		case 0:
			m.driverFeatures = m.driverFeatures&^0xffffffff | uint64(v)
		case 1:
			m.driverFeatures = m.driverFeatures&0xffffffff | uint64(v)<<32
		}
	case regQueueSel:
		m.queueSel = v
	case regInterruptACK:
		m.interruptStatus &^= v
	case regQueueNum, regQueueReady, regQueueDescLow, regQueueDescHigh,
		regQueueDriverLow, regQueueDriverHigh, regQueueDeviceLow, regQueueDeviceHigh:
		m.writeQueueRegister(offset, v)
	}
}

// writeQueueRegister updates the selected queue's configuration; mu held.
// Queues are configured only while the device is not running: once it runs
// they belong to it. Values are checked when the driver sets DRIVER_OK.
func (m *MMIO) writeQueueRegister(offset uint64, v uint32) {
	if m.running || int(m.queueSel) >= len(m.queues) {
		return
	}
	q := &m.queues[m.queueSel]
	switch offset {
	case regQueueNum:
		if v > MaxQueueSize {
			v = 0 // unusable either way; refused at DRIVER_OK
		}
		q.Size = uint16(v)
	case regQueueReady:
		q.Ready = v&1 != 0
	case regQueueDescLow:
		q.DescAddr = setLow(q.DescAddr, v)
	case regQueueDescHigh:
		q.DescAddr = setHigh(q.DescAddr, v)
	case regQueueDriverLow:
		q.AvailAddr = setLow(q.AvailAddr, v)
	case regQueueDriverHigh:
		q.AvailAddr = setHigh(q.AvailAddr, v)
	case regQueueDeviceLow:
		q.UsedAddr = setLow(q.UsedAddr, v)
	case regQueueDeviceHigh:
		q.UsedAddr = setHigh(q.UsedAddr, v)
	}
}

func setLow(x uint64, v uint32) uint64  { return x&^0xffffffff | uint64(v) }
func setHigh(x uint64, v uint32) uint64 { return x&0xffffffff | uint64(v)<<32 }

// QueueNotify delivers the driver's notification for queue q to the device.
// Writes to the QueueNotify register land here, and the VMM calls it from
// the goroutine that polls the queue's ioeventfd. Notifications for queues
// that do not exist or are disabled, or that arrive while the device is not
// running, are dropped: devices process their queues once when they start.
func (m *MMIO) QueueNotify(q int) {
	m.mu.Lock()
	ok := m.notifiable && q >= 0 && q < len(m.live) && m.live[q] != nil
	m.mu.Unlock()
	if ok {
		m.dev.Notify(q)
	}
}

// SignalUsed implements Interrupter: it sets InterruptStatus bit 0 and
// raises the interrupt. Signals from a device that is not running (a late
// completion racing a reset) are dropped.
func (m *MMIO) SignalUsed(queue int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.running {
		return nil
	}
	m.interruptStatus |= InterruptUsedBuffer
	return m.trigger()
}

// InterruptStatus returns the InterruptStatus register as the driver would
// read it: the interrupts raised and not yet acknowledged.
func (m *MMIO) InterruptStatus() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.interruptStatus
}

// SignalConfigChange implements Interrupter: the device changed its
// configuration space. It bumps ConfigGeneration (so drivers re-read
// multi-field config consistently) and, when the device runs, sets
// InterruptStatus bit 1 and raises the interrupt. The VMM calls it too when
// it changes a device's config (e.g. a balloon target).
func (m *MMIO) SignalConfigChange() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.configGeneration++
	if !m.running {
		return nil
	}
	m.interruptStatus |= InterruptConfigChange
	return m.trigger()
}

// trigger raises the interrupt line; mu held.
func (m *MMIO) trigger() error {
	if m.irq == nil {
		return nil
	}
	if err := m.irq.Trigger(); err != nil {
		return fmt.Errorf("virtio-mmio %v: raise interrupt: %w", m.dev.ID(), err)
	}
	return nil
}
