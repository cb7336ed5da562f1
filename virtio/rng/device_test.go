package rng_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/rng"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const wait = 5 * time.Second

func newMem(t *testing.T) *memory.Guest {
	t.Helper()
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

// start brings the device up through the virtio-mmio transport as a guest
// driver would.
func start(t *testing.T) (*rng.Device, *vt.Driver, *vt.IRQ) {
	t.Helper()
	mem := newMem(t)
	dev := rng.New()
	irq := vt.NewIRQ()
	m := virtio.NewMMIO(dev, mem, irq)
	d := vt.Init(t, m, mem, vt.Options{})
	t.Cleanup(d.Reset)
	if d.Read32(vt.RegDeviceID) != uint32(virtio.IDRNG) {
		t.Fatalf("device ID %d", d.Read32(vt.RegDeviceID))
	}
	if len(d.Queues) != 1 {
		t.Fatalf("%d queues, want 1", len(d.Queues))
	}
	return dev, d, irq
}

func TestEntropyThroughTransport(t *testing.T) {
	_, d, irq := start(t)
	q := d.Queues[0]
	a := q.AddChain(nil, []uint32{64})
	b := q.AddIndirectChain(nil, []uint32{16, 48})
	d.Notify(0)
	used := q.WaitUsed(2, wait)
	if !irq.Wait(wait) {
		t.Fatal("no interrupt")
	}
	if s := d.AckInterrupts(); s&virtio.InterruptUsedBuffer == 0 {
		t.Fatalf("interrupt status %#x", s)
	}
	got := map[uint16][]byte{}
	for _, u := range used {
		if u.Len != 64 || len(u.Data) != 64 {
			t.Fatalf("head %d: %d bytes written, want 64", u.Head, u.Len)
		}
		if bytes.Equal(u.Data, make([]byte, 64)) {
			t.Fatalf("head %d: all zero", u.Head)
		}
		got[u.Head] = u.Data
	}
	if bytes.Equal(got[a], got[b]) {
		t.Fatal("two requests got the same bytes")
	}
}

func TestReadableBuffersAreSkipped(t *testing.T) {
	_, d, _ := start(t)
	q := d.Queues[0]
	bad := q.AddChain([][]byte{[]byte("not a request")}, []uint32{32})
	good := q.AddChain(nil, []uint32{32})
	d.Notify(0)
	used := q.WaitUsed(2, wait)
	for _, u := range used {
		switch u.Head {
		case bad:
			if u.Len != 0 {
				t.Fatalf("malformed request completed with %d bytes", u.Len)
			}
		case good:
			if u.Len != 32 {
				t.Fatalf("request completed with %d bytes, want 32", u.Len)
			}
		}
	}
}

func TestMalformedChainDoesNotStopTheDevice(t *testing.T) {
	_, d, _ := start(t)
	q := d.Queues[0]
	q.WriteDesc(q.Size()-1, vt.Desc{Addr: 1 << 40, Len: 16, Flags: vt.DescWrite})
	q.Publish(q.Size() - 1)
	good := q.AddChain(nil, []uint32{8})
	d.Notify(0)
	used := q.WaitUsed(1, wait)
	if used[0].Head != good || used[0].Len != 8 {
		t.Fatalf("used %+v", used)
	}
}

func TestLargeRequestIsCapped(t *testing.T) {
	_, d, _ := start(t)
	q := d.Queues[0]
	q.AddChain(nil, []uint32{rng.MaxRequestBytes + 4096})
	d.Notify(0)
	if u := q.WaitUsed(1, wait); u[0].Len != rng.MaxRequestBytes {
		t.Fatalf("wrote %d bytes, want %d", u[0].Len, rng.MaxRequestBytes)
	}
}

// Buffers posted before activation are served without a notification.
func TestServesBuffersPostedBeforeActivation(t *testing.T) {
	mem := newMem(t)
	dq := vt.NewDriverQueue(t, mem, 0x10000, 16)
	dq.AddChain(nil, []uint32{16})
	q, err := virtio.NewQueue(mem, dq.State())
	if err != nil {
		t.Fatal(err)
	}
	irq := vt.NewInterrupter()
	dev := rng.New()
	if err := dev.Activate(virtio.Env{Mem: mem, Features: virtio.FeatureVersion1, Queues: []*virtio.Queue{q}, Interrupt: irq}); err != nil {
		t.Fatal(err)
	}
	defer dev.Reset()
	if u := dq.WaitUsed(1, wait); u[0].Len != 16 {
		t.Fatalf("used %+v", u)
	}
	if !irq.Wait(wait) || irq.Used(0) != 1 {
		t.Fatalf("%d used signals, want 1", irq.Used(0))
	}
	if err := dev.Activate(virtio.Env{Mem: mem, Queues: []*virtio.Queue{q}, Interrupt: irq}); err == nil {
		t.Fatal("second Activate without Reset succeeded")
	}
}

func TestActivateNeedsTheQueue(t *testing.T) {
	dev := rng.New()
	if err := dev.Activate(virtio.Env{Queues: []*virtio.Queue{nil}}); err == nil {
		t.Fatal("Activate without a queue succeeded")
	}
}

func TestResetStopsService(t *testing.T) {
	dev, d, _ := start(t)
	q := d.Queues[0]
	q.AddChain(nil, []uint32{8})
	d.Notify(0)
	q.WaitUsed(1, wait)
	dev.Reset()
	// The worker is gone: a new buffer and a kick go unanswered.
	q.AddChain(nil, []uint32{8})
	dev.Notify(0)
	time.Sleep(50 * time.Millisecond)
	if u := q.Used(); len(u) != 0 {
		t.Fatalf("device served %d requests after Reset", len(u))
	}
	dev.Reset() // idempotent
}

func TestNoConfigSpace(t *testing.T) {
	_, d, _ := start(t)
	if b := d.ReadConfig(0, 8); !bytes.Equal(b, make([]byte, 8)) {
		t.Fatalf("config reads %x", b)
	}
	feats := d.DeviceFeatures()
	if feats&0xffffff != 0 {
		t.Fatalf("device-specific features %#x offered", feats)
	}
}
