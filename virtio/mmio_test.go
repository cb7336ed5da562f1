package virtio_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	vt "github.com/smolvm/smol/virtio/virtiotest"
)

// fakeDevice records what the transport asks of it.
type fakeDevice struct {
	mu          sync.Mutex
	features    uint64
	sizes       []uint16
	config      [16]byte
	activateErr error
	activations []virtio.Env
	notifies    []int
	resets      int
}

func (d *fakeDevice) ID() virtio.DeviceID  { return virtio.IDBlock }
func (d *fakeDevice) Features() uint64     { return d.features }
func (d *fakeDevice) QueueSizes() []uint16 { return d.sizes }
func (d *fakeDevice) Notify(q int)         { d.mu.Lock(); d.notifies = append(d.notifies, q); d.mu.Unlock() }
func (d *fakeDevice) Reset()               { d.mu.Lock(); d.resets++; d.mu.Unlock() }
func (d *fakeDevice) Activate(env virtio.Env) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.activateErr != nil {
		return d.activateErr
	}
	d.activations = append(d.activations, env)
	return nil
}
func (d *fakeDevice) ReadConfig(off uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range data {
		if off+uint64(i) < uint64(len(d.config)) {
			data[i] = d.config[off+uint64(i)]
		}
	}
}
func (d *fakeDevice) WriteConfig(off uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range data {
		if off+uint64(i) < uint64(len(d.config)) {
			d.config[off+uint64(i)] = data[i]
		}
	}
}

func (d *fakeDevice) counts() (activations, resets int, notifies []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.activations), d.resets, append([]int(nil), d.notifies...)
}

const (
	devFeatureA   = 1 << 5
	devFeatureB   = 1 << 52
	statusToFeats = virtio.StatusAcknowledge | virtio.StatusDriver
)

func newTransport(t *testing.T) (*fakeDevice, *virtio.MMIO, *vt.IRQ, *vt.Driver) {
	t.Helper()
	dev := &fakeDevice{features: devFeatureA | devFeatureB | 1<<30 /* reserved: masked */, sizes: []uint16{16, 8}}
	mem := newMem(t)
	irq := vt.NewIRQ()
	m := virtio.NewMMIO(dev, mem, irq)
	return dev, m, irq, vt.NewDriver(t, m, mem)
}

func TestMMIOIdentityRegisters(t *testing.T) {
	_, _, _, d := newTransport(t)
	for _, r := range []struct {
		off  uint64
		want uint32
	}{
		{vt.RegMagicValue, 0x74726976},
		{vt.RegVersion, 2},
		{vt.RegDeviceID, uint32(virtio.IDBlock)},
		{vt.RegVendorID, virtio.VendorID},
		{vt.RegQueueNumMax, 16},
		{vt.RegStatus, 0},
	} {
		if got := d.Read32(r.off); got != r.want {
			t.Errorf("register %#x = %#x, want %#x", r.off, got, r.want)
		}
	}
	var vendor [4]byte
	binary.LittleEndian.PutUint32(vendor[:], virtio.VendorID)
	if string(vendor[:]) != "SMOL" {
		t.Errorf("vendor ID spells %q", vendor)
	}
	// Narrow, wide and unaligned register reads are invalid and read 0.
	for _, n := range []int{1, 2, 8} {
		b := make([]byte, n)
		for i := range b {
			b[i] = 0xaa
		}
		d.Transport.Read(vt.RegMagicValue, b)
		for _, x := range b {
			if x != 0 {
				t.Fatalf("%d-byte read of MagicValue = %x, want zeroes", n, b)
			}
		}
	}
	b := make([]byte, 4)
	d.Transport.Read(vt.RegMagicValue+2, b)
	if binary.LittleEndian.Uint32(b) != 0 {
		t.Fatalf("unaligned read = %x", b)
	}
}

func TestMMIOFeatureNegotiation(t *testing.T) {
	_, m, _, d := newTransport(t)
	want := uint64(devFeatureA|devFeatureB) | virtio.FeatureVersion1 | virtio.FeatureRingIndirectDesc | virtio.FeatureRingEventIdx
	if got := d.DeviceFeatures(); got != want {
		t.Fatalf("offered %#x, want %#x (reserved device bit must be masked)", got, want)
	}
	if m.OfferedFeatures() != want {
		t.Fatalf("OfferedFeatures %#x", m.OfferedFeatures())
	}
	d.Write32(vt.RegDeviceFeaturesSel, 2)
	if d.Read32(vt.RegDeviceFeatures) != 0 {
		t.Fatal("feature bank 2 not zero")
	}

	try := func(feats uint64) bool {
		d.Reset()
		d.Write32(vt.RegStatus, virtio.StatusAcknowledge)
		d.Write32(vt.RegStatus, statusToFeats)
		d.WriteDriverFeatures(feats)
		d.Write32(vt.RegStatus, statusToFeats|virtio.StatusFeaturesOK)
		s := d.Status()
		if s&statusToFeats != statusToFeats {
			t.Fatalf("status %#x lost ACKNOWLEDGE|DRIVER", s)
		}
		return s&virtio.StatusFeaturesOK != 0
	}
	if try(virtio.FeatureVersion1 | 1<<7) {
		t.Error("FEATURES_OK accepted with an unoffered feature")
	}
	if try(devFeatureA) {
		t.Error("FEATURES_OK accepted without VERSION_1")
	}
	if try(virtio.FeatureVersion1 | 1<<30) {
		t.Error("FEATURES_OK accepted a masked reserved bit")
	}
	if !try(virtio.FeatureVersion1 | devFeatureB) {
		t.Fatal("FEATURES_OK refused for a valid subset")
	}
	// Features are frozen after FEATURES_OK.
	d.WriteDriverFeatures(want | 1<<7)
	d.Write32(vt.RegStatus, statusToFeats|virtio.StatusFeaturesOK|virtio.StatusDriverOK)
	if d.Status()&virtio.StatusDriverOK == 0 {
		t.Fatal("DRIVER_OK refused")
	}
	if got := m.State().DriverFeatures; got != virtio.FeatureVersion1|devFeatureB {
		t.Fatalf("driver features %#x changed after FEATURES_OK", got)
	}
}

func TestMMIOStatusStateMachine(t *testing.T) {
	dev, _, _, d := newTransport(t)
	d.Write32(vt.RegStatus, virtio.StatusDriver)
	if d.Status() != 0 {
		t.Fatalf("DRIVER without ACKNOWLEDGE accepted: %#x", d.Status())
	}
	d.Write32(vt.RegStatus, virtio.StatusAcknowledge|virtio.StatusNeedsReset)
	if d.Status() != virtio.StatusAcknowledge {
		t.Fatalf("driver set DEVICE_NEEDS_RESET: %#x", d.Status())
	}
	d.Write32(vt.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusDriverOK)
	if d.Status() != statusToFeats {
		t.Fatalf("DRIVER_OK without FEATURES_OK: status %#x", d.Status())
	}
	if n, _, _ := dev.counts(); n != 0 {
		t.Fatal("device activated without FEATURES_OK")
	}
	d.Write32(vt.RegStatus, virtio.StatusDriver)
	if d.Status() != statusToFeats {
		t.Fatalf("driver cleared a status bit without reset: %#x", d.Status())
	}
	d.Write32(vt.RegStatus, statusToFeats|virtio.StatusFailed)
	if d.Status() != statusToFeats|virtio.StatusFailed {
		t.Fatalf("FAILED not recorded: %#x", d.Status())
	}
}

func TestMMIOActivateNotifyAndReset(t *testing.T) {
	dev, m, _, d0 := newTransport(t)
	mem := d0.Mem
	d := vt.Init(t, m, mem, vt.Options{Features: virtio.FeatureRingEventIdx})
	n, _, _ := dev.counts()
	if n != 1 {
		t.Fatalf("%d activations, want 1", n)
	}
	env := dev.activations[0]
	if env.Features != virtio.FeatureVersion1|virtio.FeatureRingEventIdx {
		t.Fatalf("env features %#x", env.Features)
	}
	if len(env.Queues) != 2 || env.Queues[0].Size() != 16 || env.Queues[1].Size() != 8 {
		t.Fatalf("env queues %v", env.Queues)
	}
	if !env.Queues[0].State().EventIdx || env.Queues[0].State().IndirectDesc {
		t.Fatalf("queue options %+v", env.Queues[0].State())
	}
	// The device sees the driver's chains through the queues it was given.
	d.Queues[1].AddChain([][]byte{[]byte("q1")}, nil)
	if c, err := env.Queues[1].Pop(); err != nil || c == nil || c.ReadableLen() != 2 {
		t.Fatalf("device Pop = %v, %v", c, err)
	}

	d.Notify(1)
	d.Notify(0)
	d.Notify(2)       // no such queue
	d.Notify(1 << 20) // nonsense
	m.QueueNotify(-1)
	m.QueueNotify(0) // the ioeventfd path
	if _, _, got := dev.counts(); !equalInts(got, []int{1, 0, 0}) {
		t.Fatalf("notifies %v, want [1 0 0]", got)
	}
	// Queue registers are frozen while the device runs.
	d.Write32(vt.RegQueueSel, 0)
	d.Write32(vt.RegQueueReady, 0)
	if d.Read32(vt.RegQueueReady) != 1 {
		t.Fatal("QueueReady cleared while running")
	}

	gen := d.Read32(vt.RegConfigGeneration)
	_, resetsBefore, _ := dev.counts()
	if err := m.SignalConfigChange(); err != nil {
		t.Fatal(err)
	}
	if d.Read32(vt.RegConfigGeneration) != gen+1 {
		t.Fatal("config generation not bumped")
	}

	d.Reset()
	if _, resets, _ := dev.counts(); resets != resetsBefore+1 {
		t.Fatalf("%d device resets, want %d", resets, resetsBefore+1)
	}
	if d.Status() != 0 || d.Read32(vt.RegInterruptStatus) != 0 || d.Read32(vt.RegQueueReady) != 0 {
		t.Fatalf("registers survive reset: status %#x", d.Status())
	}
	if d.Read32(vt.RegConfigGeneration) != gen+1 {
		t.Fatal("config generation went back on reset")
	}
	m.QueueNotify(0)
	if _, _, got := dev.counts(); len(got) != 3 {
		t.Fatal("notification delivered after reset")
	}
	// The device can be brought up again.
	vt.Init(t, m, mem, vt.Options{})
	if n, _, _ := dev.counts(); n != 2 {
		t.Fatalf("%d activations after re-init, want 2", n)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// driveToFeaturesOK negotiates VERSION_1 and sets up both queues with the
// driver queues' geometry.
func driveToFeaturesOK(t *testing.T, d *vt.Driver) []*vt.DriverQueue {
	t.Helper()
	d.Reset()
	d.Write32(vt.RegStatus, virtio.StatusAcknowledge)
	d.Write32(vt.RegStatus, statusToFeats)
	d.WriteDriverFeatures(virtio.FeatureVersion1)
	d.Write32(vt.RegStatus, statusToFeats|virtio.StatusFeaturesOK)
	q0 := vt.NewDriverQueue(t, d.Mem, 0x10000, 16)
	q1 := vt.NewDriverQueue(t, d.Mem, q0.Layout().End(), 8)
	d.SetupQueue(0, q0)
	d.SetupQueue(1, q1)
	return []*vt.DriverQueue{q0, q1}
}

const allOK = statusToFeats | virtio.StatusFeaturesOK | virtio.StatusDriverOK

func TestMMIOActivateFailureNeedsReset(t *testing.T) {
	dev, _, irq, d := newTransport(t)
	dev.activateErr = errors.New("backend gone")
	driveToFeaturesOK(t, d)
	_, resetsBefore, _ := dev.counts()
	gen := d.Read32(vt.RegConfigGeneration)
	d.Write32(vt.RegStatus, allOK)
	s := d.Status()
	if s&virtio.StatusNeedsReset == 0 || s&virtio.StatusDriverOK != 0 {
		t.Fatalf("status %#x after failed activation", s)
	}
	if d.Read32(vt.RegInterruptStatus) != virtio.InterruptConfigChange || irq.Count() != 1 {
		t.Fatalf("interrupt status %#x, %d triggers", d.Read32(vt.RegInterruptStatus), irq.Count())
	}
	if d.Read32(vt.RegConfigGeneration) == gen {
		t.Fatal("config generation not bumped")
	}
	if _, resets, _ := dev.counts(); resets != resetsBefore+1 {
		t.Fatal("device not reset after failed Activate")
	}
	d.Notify(0)
	if _, _, n := dev.counts(); len(n) != 0 {
		t.Fatal("notification delivered to a device that failed to activate")
	}
	// The driver cannot clear NEEDS_RESET but can reset and retry.
	d.Write32(vt.RegStatus, allOK&^virtio.StatusNeedsReset)
	if d.Status()&virtio.StatusNeedsReset == 0 {
		t.Fatal("driver cleared DEVICE_NEEDS_RESET")
	}
	dev.activateErr = nil
	driveToFeaturesOK(t, d)
	d.Write32(vt.RegStatus, allOK)
	if d.Status() != allOK {
		t.Fatalf("status %#x after retry", d.Status())
	}
}

func TestMMIOInvalidQueueGeometryNeedsReset(t *testing.T) {
	for name, setup := range map[string]func(d *vt.Driver){
		"size not power of two": func(d *vt.Driver) { d.Write32(vt.RegQueueSel, 0); d.Write32(vt.RegQueueNum, 12) },
		"size above maximum":    func(d *vt.Driver) { d.Write32(vt.RegQueueSel, 1); d.Write32(vt.RegQueueNum, 16) },
		"size zero":             func(d *vt.Driver) { d.Write32(vt.RegQueueSel, 1); d.Write32(vt.RegQueueNum, 0) },
		"size beyond 16 bits":   func(d *vt.Driver) { d.Write32(vt.RegQueueSel, 1); d.Write32(vt.RegQueueNum, 1<<16+8) },
		"ring outside RAM":      func(d *vt.Driver) { d.Write32(vt.RegQueueSel, 0); d.Write32(vt.RegQueueDescHigh, 1) },
		"misaligned used ring":  func(d *vt.Driver) { d.Write32(vt.RegQueueSel, 0); d.Write32(vt.RegQueueDeviceLow, 0x10002) },
	} {
		t.Run(name, func(t *testing.T) {
			dev, _, _, d := newTransport(t)
			driveToFeaturesOK(t, d)
			setup(d)
			d.Write32(vt.RegStatus, allOK)
			if s := d.Status(); s&virtio.StatusNeedsReset == 0 || s&virtio.StatusDriverOK != 0 {
				t.Fatalf("status %#x", s)
			}
			if n, _, _ := dev.counts(); n != 0 {
				t.Fatal("device activated with an invalid queue")
			}
		})
	}
}

func TestMMIODisabledQueueIsNil(t *testing.T) {
	dev, _, _, d := newTransport(t)
	driveToFeaturesOK(t, d)
	d.Write32(vt.RegQueueSel, 1)
	d.Write32(vt.RegQueueReady, 0)
	d.Write32(vt.RegStatus, allOK)
	if d.Status() != allOK {
		t.Fatalf("status %#x", d.Status())
	}
	if q := dev.activations[0].Queues; q[0] == nil || q[1] != nil {
		t.Fatalf("queues %v, want [queue nil]", q)
	}
	d.Notify(1)
	if _, _, n := dev.counts(); len(n) != 0 {
		t.Fatal("notification for a disabled queue delivered")
	}
}

func TestMMIOInterrupts(t *testing.T) {
	_, m, irq, d := newTransport(t)
	if err := m.SignalUsed(0); err != nil || irq.Count() != 0 {
		t.Fatalf("signal before DRIVER_OK: %v, %d triggers", err, irq.Count())
	}
	driveToFeaturesOK(t, d)
	d.Write32(vt.RegStatus, allOK)
	if err := m.SignalUsed(0); err != nil {
		t.Fatal(err)
	}
	if err := m.SignalConfigChange(); err != nil {
		t.Fatal(err)
	}
	if irq.Count() != 2 {
		t.Fatalf("%d triggers, want 2", irq.Count())
	}
	if got := d.Read32(vt.RegInterruptStatus); got != virtio.InterruptUsedBuffer|virtio.InterruptConfigChange {
		t.Fatalf("interrupt status %#x", got)
	}
	d.Write32(vt.RegInterruptACK, virtio.InterruptUsedBuffer)
	if got := d.Read32(vt.RegInterruptStatus); got != virtio.InterruptConfigChange {
		t.Fatalf("after ACK of bit 0: %#x", got)
	}
	if got := d.AckInterrupts(); got != virtio.InterruptConfigChange || d.Read32(vt.RegInterruptStatus) != 0 {
		t.Fatalf("AckInterrupts %#x", got)
	}
}

func TestMMIOConfigSpaceAccess(t *testing.T) {
	dev, _, _, d := newTransport(t)
	for i := range dev.config {
		dev.config[i] = byte(i)
	}
	for _, n := range []int{1, 2, 4, 8} {
		got := d.ReadConfig(4, n)
		for i, b := range got {
			if b != byte(4+i) {
				t.Fatalf("%d-byte config read = %x", n, got)
			}
		}
	}
	odd := []byte{0xaa, 0xaa, 0xaa}
	d.Transport.Read(virtiotest.RegConfig, odd)
	if odd[0] != 0 || odd[2] != 0 {
		t.Fatalf("3-byte config read = %x, want zeroes", odd)
	}
	d.WriteConfig(2, []byte{0xde, 0xad})
	d.WriteConfig(0, []byte{1, 2, 3}) // invalid width: ignored
	if dev.config[0] != 0 || dev.config[2] != 0xde || dev.config[3] != 0xad {
		t.Fatalf("config %x", dev.config)
	}
	// Beyond the window: ignored and zero.
	b := []byte{0xff}
	d.Transport.Read(virtio.MMIOWindowSize, b)
	if b[0] != 0 {
		t.Fatal("read beyond the window returned data")
	}
}

func TestMMIOSharedMemoryRegionsAbsent(t *testing.T) {
	_, _, _, d := newTransport(t)
	d.Write32(0xac, 0)
	if d.Read32(0xb0) != 0xffffffff || d.Read32(0xb4) != 0xffffffff {
		t.Fatal("shared memory length not all ones")
	}
}

func TestMMIOStateRestore(t *testing.T) {
	dev, m, _, d0 := newTransport(t)
	mem := d0.Mem
	d := vt.Init(t, m, mem, vt.Options{})
	q := dev.activations[0].Queues[0]
	d.Queues[0].AddChain([][]byte{[]byte("one")}, nil)
	d.Queues[0].AddChain([][]byte{[]byte("two")}, nil)
	c, err := q.Pop()
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	if err := q.Push(c, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.SignalUsed(0); err != nil {
		t.Fatal(err)
	}
	st := m.State()
	if st.Status != allOK || st.Queues[0].NextAvail != 1 || st.Queues[0].NextUsed != 1 {
		t.Fatalf("state %+v", st)
	}

	if st.InterruptStatus != virtio.InterruptUsedBuffer {
		t.Fatalf("interrupt status %#x before the snapshot, want the used buffer's", st.InterruptStatus)
	}

	dev2 := &fakeDevice{features: dev.features, sizes: dev.sizes}
	irq2 := vt.NewIRQ()
	m2 := virtio.NewMMIO(dev2, mem, irq2)
	if err := m2.Restore(st); err != nil {
		t.Fatal(err)
	}
	if len(dev2.activations) != 1 {
		t.Fatal("restored device not activated")
	}
	// The used buffer's interrupt was not acknowledged: its edge may
	// have been in flight when the state was read, so it is raised again.
	if irq2.Count() != 1 || m2.InterruptStatus() != virtio.InterruptUsedBuffer {
		t.Fatalf("after restore: %d interrupts, status %#x; want 1 and the used buffer's", irq2.Count(), m2.InterruptStatus())
	}
	acked := st
	acked.InterruptStatus = 0
	irq3 := vt.NewIRQ()
	if err := virtio.NewMMIO(&fakeDevice{features: dev.features, sizes: dev.sizes}, mem, irq3).Restore(acked); err != nil || irq3.Count() != 0 {
		t.Fatalf("restore with every interrupt acknowledged: %v, %d interrupts, want none", err, irq3.Count())
	}
	c, err = dev2.activations[0].Queues[0].Pop()
	if err != nil || c == nil || c.ReadableLen() != 3 {
		t.Fatalf("restored queue Pop = %v, %v", c, err)
	}
	m2.QueueNotify(0)
	if len(dev2.notifies) != 1 {
		t.Fatal("restored transport does not deliver notifications")
	}
	if got := m2.State(); got.Status != st.Status || got.DriverFeatures != st.DriverFeatures {
		t.Fatalf("restored state %+v", got)
	}

	bad := st
	bad.Queues = st.Queues[:1]
	if err := m2.Restore(bad); !errors.Is(err, virtio.ErrBadState) {
		t.Fatalf("Restore with wrong queue count = %v", err)
	}
}

// Registers, notifications and interrupts from many goroutines at once must
// neither race nor deadlock.
func TestMMIOConcurrentAccess(t *testing.T) {
	_, m, _, d0 := newTransport(t)
	mem := d0.Mem
	vt.Init(t, m, mem, vt.Options{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 4)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (i + g) % 5 {
				case 0:
					m.Read(vt.RegStatus, b)
				case 1:
					m.QueueNotify(i % 3)
				case 2:
					_ = m.SignalUsed(0)
				case 3:
					_ = m.SignalConfigChange()
				case 4:
					m.Read(vt.RegConfig, b)
				}
			}
		}()
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		m.Reset()
		vt.Init(t, m, mem, vt.Options{})
	}
	close(stop)
	wg.Wait()
}
