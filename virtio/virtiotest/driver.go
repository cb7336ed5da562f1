package virtiotest

import (
	"encoding/binary"
	"testing"

	"github.com/smolvm/smol/devices"
	"github.com/smolvm/smol/virtio"
)

// Register offsets of the virtio-mmio transport, as a driver uses them.
const (
	RegMagicValue        = 0x000
	RegVersion           = 0x004
	RegDeviceID          = 0x008
	RegVendorID          = 0x00c
	RegDeviceFeatures    = 0x010
	RegDeviceFeaturesSel = 0x014
	RegDriverFeatures    = 0x020
	RegDriverFeaturesSel = 0x024
	RegQueueSel          = 0x030
	RegQueueNumMax       = 0x034
	RegQueueNum          = 0x038
	RegQueueReady        = 0x044
	RegQueueNotify       = 0x050
	RegInterruptStatus   = 0x060
	RegInterruptACK      = 0x064
	RegStatus            = 0x070
	RegQueueDescLow      = 0x080
	RegQueueDescHigh     = 0x084
	RegQueueDriverLow    = 0x090
	RegQueueDriverHigh   = 0x094
	RegQueueDeviceLow    = 0x0a0
	RegQueueDeviceHigh   = 0x0a4
	RegConfigGeneration  = 0x0fc
	RegConfig            = 0x100
)

// DefaultQueueBase is where Init lays out queues unless told otherwise.
const DefaultQueueBase = 0x10000

// Options tune Init.
type Options struct {
	// Features the driver is willing to accept; the zero value accepts
	// everything offered. VERSION_1 is always accepted.
	Features uint64
	// QueueSize caps every queue's size (0: each queue's maximum).
	QueueSize uint16
	// Base is where the queues (and their data areas) are laid out
	// (0: DefaultQueueBase).
	Base uint64
}

// Driver is a guest driver bound to one virtio-mmio transport.
type Driver struct {
	tb        testing.TB
	Transport devices.Device
	Mem       virtio.Memory
	// Features are the negotiated features.
	Features uint64
	// Queues holds one DriverQueue per device queue.
	Queues []*DriverQueue
}

// NewDriver binds a driver to a transport without touching it, for tests
// that perform the initialisation steps themselves.
func NewDriver(tb testing.TB, transport devices.Device, mem virtio.Memory) *Driver {
	return &Driver{tb: tb, Transport: transport, Mem: mem}
}

// Init runs the driver initialisation sequence of virtio 1.2 section 3.1.1
// through the transport: reset, ACKNOWLEDGE, DRIVER, feature negotiation,
// FEATURES_OK (checked), queue setup for every queue the device reports,
// DRIVER_OK (checked). It fails the test at any refusal.
func Init(tb testing.TB, transport devices.Device, mem virtio.Memory, opts Options) *Driver {
	tb.Helper()
	d := NewDriver(tb, transport, mem)
	if got := d.Read32(RegMagicValue); got != virtio.MMIOMagic {
		tb.Fatalf("virtiotest: magic %#x, want %#x", got, virtio.MMIOMagic)
	}
	if got := d.Read32(RegVersion); got != virtio.MMIOVersion {
		tb.Fatalf("virtiotest: version %d, want %d", got, virtio.MMIOVersion)
	}
	d.Write32(RegStatus, 0)
	d.Write32(RegStatus, virtio.StatusAcknowledge)
	d.Write32(RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver)

	want := opts.Features
	if want == 0 {
		want = ^uint64(0)
	}
	d.Features = d.DeviceFeatures() & (want | virtio.FeatureVersion1)
	d.WriteDriverFeatures(d.Features)
	status := uint32(virtio.StatusAcknowledge | virtio.StatusDriver | virtio.StatusFeaturesOK)
	d.Write32(RegStatus, status)
	if got := d.Read32(RegStatus); got&virtio.StatusFeaturesOK == 0 {
		tb.Fatalf("virtiotest: device refused features %#x (status %#x)", d.Features, got)
	}

	base := opts.Base
	if base == 0 {
		base = DefaultQueueBase
	}
	for i := uint32(0); ; i++ {
		d.Write32(RegQueueSel, i)
		maxSize := uint16(d.Read32(RegQueueNumMax))
		if maxSize == 0 {
			break
		}
		size := maxSize
		if opts.QueueSize != 0 {
			size = min(size, opts.QueueSize)
		}
		q := NewDriverQueue(tb, mem, base, size)
		d.SetupQueue(int(i), q)
		d.Queues = append(d.Queues, q)
		base = alignUp(q.Layout().End(), 4096)
	}

	d.Write32(RegStatus, status|virtio.StatusDriverOK)
	if got := d.Read32(RegStatus); got&virtio.StatusDriverOK == 0 || got&virtio.StatusNeedsReset != 0 {
		tb.Fatalf("virtiotest: device did not accept DRIVER_OK (status %#x)", got)
	}
	return d
}

// DeviceFeatures reads both feature banks the device offers.
func (d *Driver) DeviceFeatures() uint64 {
	d.tb.Helper()
	d.Write32(RegDeviceFeaturesSel, 0)
	lo := d.Read32(RegDeviceFeatures)
	d.Write32(RegDeviceFeaturesSel, 1)
	hi := d.Read32(RegDeviceFeatures)
	return uint64(hi)<<32 | uint64(lo)
}

// WriteDriverFeatures writes both banks of the driver's features.
func (d *Driver) WriteDriverFeatures(f uint64) {
	d.tb.Helper()
	d.Write32(RegDriverFeaturesSel, 0)
	d.Write32(RegDriverFeatures, uint32(f))
	d.Write32(RegDriverFeaturesSel, 1)
	d.Write32(RegDriverFeatures, uint32(f>>32))
}

// SetupQueue programs queue index with q's size and ring addresses and
// enables it.
func (d *Driver) SetupQueue(index int, q *DriverQueue) {
	d.tb.Helper()
	l := q.Layout()
	d.Write32(RegQueueSel, uint32(index))
	d.Write32(RegQueueNum, uint32(q.Size()))
	d.Write32(RegQueueDescLow, uint32(l.Desc))
	d.Write32(RegQueueDescHigh, uint32(l.Desc>>32))
	d.Write32(RegQueueDriverLow, uint32(l.Avail))
	d.Write32(RegQueueDriverHigh, uint32(l.Avail>>32))
	d.Write32(RegQueueDeviceLow, uint32(l.Used))
	d.Write32(RegQueueDeviceHigh, uint32(l.Used>>32))
	d.Write32(RegQueueReady, 1)
}

// Read32 reads a 32-bit transport register.
func (d *Driver) Read32(offset uint64) uint32 {
	var b [4]byte
	d.Transport.Read(offset, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// Write32 writes a 32-bit transport register.
func (d *Driver) Write32(offset uint64, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	d.Transport.Write(offset, b[:])
}

// Status reads the device status.
func (d *Driver) Status() uint32 { return d.Read32(RegStatus) }

// Notify tells the device queue has new buffers.
func (d *Driver) Notify(queue int) { d.Write32(RegQueueNotify, uint32(queue)) }

// AckInterrupts reads InterruptStatus, acknowledges what it found and
// returns it, as the driver's interrupt handler does.
func (d *Driver) AckInterrupts() uint32 {
	s := d.Read32(RegInterruptStatus)
	if s != 0 {
		d.Write32(RegInterruptACK, s)
	}
	return s
}

// Reset writes 0 to Status.
func (d *Driver) Reset() { d.Write32(RegStatus, 0) }

// ReadConfig reads n bytes of config space at offset with one access of
// width n (1, 2, 4 or 8).
func (d *Driver) ReadConfig(offset uint64, n int) []byte {
	b := make([]byte, n)
	d.Transport.Read(RegConfig+offset, b)
	return b
}

// WriteConfig writes config space at offset with one access of width
// len(data).
func (d *Driver) WriteConfig(offset uint64, data []byte) {
	d.Transport.Write(RegConfig+offset, data)
}
