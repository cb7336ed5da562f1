package net

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const waitTimeout = 5 * time.Second

var testMAC = [6]byte{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}

// rig is a device behind the real virtio-mmio transport, with a driver.
type rig struct {
	t       *testing.T
	mem     *memory.Guest
	backend *fakeBackend
	dev     *Device
	irq     *virtiotest.IRQ
	mmio    *virtio.MMIO
	drv     *virtiotest.Driver
	rx, tx  *virtiotest.DriverQueue
}

// newRig builds the device over a fake backend supporting supported
// offloads, and initialises a driver that accepts accept (0: everything).
func newRig(t *testing.T, opts Options, supported, accept uint64) *rig {
	t.Helper()
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	if opts.MAC == [6]byte{} {
		opts.MAC = testMAC
	}
	fb := newFakeBackend(supported)
	dev, err := New(fb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Reset() })
	irq := virtiotest.NewIRQ()
	mmio := virtio.NewMMIO(dev, mem, irq)
	drv := virtiotest.Init(t, mmio, mem, virtiotest.Options{Features: accept})
	if len(drv.Queues) != 2 {
		t.Fatalf("device has %d queues, want 2", len(drv.Queues))
	}
	return &rig{t: t, mem: mem, backend: fb, dev: dev, irq: irq, mmio: mmio, drv: drv, rx: drv.Queues[RxQueue], tx: drv.Queues[TxQueue]}
}

// ethFrame is an Ethernet frame of n bytes (n >= 14) with a recognisable
// payload.
func ethFrame(n int, seed byte) []byte {
	f := make([]byte, n)
	copy(f[0:6], testMAC[:])
	copy(f[6:12], []byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	for i := 14; i < n; i++ {
		f[i] = seed + byte(i*7)
	}
	return f
}

// packet is header h followed by frame.
func packet(h Header, frame []byte) []byte {
	p := make([]byte, HeaderSize, HeaderSize+len(frame))
	h.Put(p)
	return append(p, frame...)
}

// send makes a transmit chain of the given readable pieces available and
// notifies.
func (r *rig) send(pieces ...[]byte) uint16 {
	r.t.Helper()
	head := r.tx.AddChain(pieces, nil)
	r.drv.Notify(TxQueue)
	return head
}

// postRx makes one receive chain per entry available, each with writable
// buffers of the given lengths, and notifies.
func (r *rig) postRx(chains ...[]uint32) []uint16 {
	r.t.Helper()
	var heads []uint16
	for _, c := range chains {
		heads = append(heads, r.rx.AddChain(nil, c))
	}
	r.drv.Notify(RxQueue)
	return heads
}

// quiet asserts that nothing more arrives on q for a while.
func quiet(t *testing.T, q *virtiotest.DriverQueue, what string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if got := q.Used(); len(got) != 0 {
		t.Fatalf("%s: unexpected used entries %+v", what, got)
	}
}

// concat joins the data of used entries.
func concat(used []virtiotest.UsedElem) []byte {
	var b []byte
	for _, u := range used {
		b = append(b, u.Data...)
	}
	return b
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs: got %d bytes %x..., want %d bytes %x...", what, len(got), head(got), len(want), head(want))
	}
}

func head(b []byte) []byte { return b[:min(len(b), 32)] }
