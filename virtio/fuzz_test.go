package virtio_test

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/rng"
	vt "github.com/smolvm/smol/virtio/virtiotest"
)

// Layout of the queue FuzzPop exercises: the input after its header byte is
// copied to guest address 0, so its first bytes are the descriptor table and
// the next ones the avail ring (at 16*size); anything longer lands in the
// data area, where indirect tables and buffers can point. The used ring sits
// above what short inputs cover. Inputs stay short so that the fuzzer's
// minimisation stays cheap.
const (
	fuzzMemSize  = 16 << 10
	fuzzUsedAddr = 0x3000
)

func fuzzQueueSize(header byte) uint16 { return 1 << (header >> 2 & 7) }

// fuzzPopInput builds a FuzzPop input: a header byte, the descriptor table
// and the avail ring.
func fuzzPopInput(header byte, descs []vt.Desc, availIdx uint16, ring ...uint16) []byte {
	availAddr := 16 * int(fuzzQueueSize(header))
	b := make([]byte, 1+availAddr+4+2*len(ring))
	b[0] = header
	for i, d := range descs {
		e := b[1+16*i:]
		binary.LittleEndian.PutUint64(e[0:], d.Addr)
		binary.LittleEndian.PutUint32(e[8:], d.Len)
		binary.LittleEndian.PutUint16(e[12:], d.Flags)
		binary.LittleEndian.PutUint16(e[14:], d.Next)
	}
	a := b[1+availAddr:]
	binary.LittleEndian.PutUint16(a[2:], availIdx)
	for i, h := range ring {
		binary.LittleEndian.PutUint16(a[4+2*i:], h)
	}
	return b
}

// FuzzPop feeds arbitrary descriptor tables and avail rings to the chain
// walker. Header byte: bit 0 EVENT_IDX, bit 1 INDIRECT_DESC, bits 2-4 the
// queue size exponent (1 to 128).
func FuzzPop(f *testing.F) {
	const indirect, size8 = 2, 3 << 2
	f.Add(fuzzPopInput(size8, []vt.Desc{{Addr: 0x200, Len: 16, Flags: fNext, Next: 1}, {Addr: 0x300, Len: 32, Flags: fWrite}}, 1, 0))
	f.Add(fuzzPopInput(size8|indirect, []vt.Desc{{Addr: 0x100, Len: 32, Flags: fInd}}, 1, 0))
	f.Add(fuzzPopInput(size8|1, []vt.Desc{{Addr: 0x200, Len: 16, Flags: fNext, Next: 0}}, 2, 0, 0))
	f.Add(fuzzPopInput(size8, nil, 9, 0))

	mem := newMem(f)
	guest := mem.Bytes()[:fuzzMemSize]
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		clear(guest)
		copy(guest, data[1:])
		size := fuzzQueueSize(data[0])
		q, err := virtio.NewQueue(fuzzMemory{mem}, virtio.QueueState{
			Size: size, Ready: true, DescAddr: 0, AvailAddr: 16 * uint64(size), UsedAddr: fuzzUsedAddr,
			EventIdx: data[0]&1 != 0, IndirectDesc: data[0]&2 != 0,
		})
		if err != nil {
			t.Fatalf("NewQueue: %v", err)
		}
		for range 2*int(size) + 2 {
			c, err := q.Pop()
			if err != nil {
				if !errors.Is(err, virtio.ErrMalformed) {
					t.Fatalf("Pop error does not wrap ErrMalformed: %v", err)
				}
				continue
			}
			if c == nil {
				break
			}
			checkFuzzedChain(t, q, c)
		}
		q.NeedsInterrupt()
	})
}

// fuzzMemory confines the fuzzed queue to the first fuzzMemSize bytes of
// guest RAM, so buffers are small and each run clears all it can touch.
type fuzzMemory struct{ virtio.Memory }

func (m fuzzMemory) Slice(addr, length uint64) ([]byte, error) {
	if addr > fuzzMemSize || length > fuzzMemSize-addr {
		return nil, errors.New("outside fuzz memory")
	}
	return m.Memory.Slice(addr, length)
}

func checkFuzzedChain(t *testing.T, q *virtio.Queue, c *virtio.Chain) {
	if c.Head >= q.Size() {
		t.Fatalf("head %d >= size %d", c.Head, q.Size())
	}
	total := uint64(0)
	for _, b := range append(c.Readable(), c.Writable()...) {
		if b.Len == 0 {
			t.Fatal("zero-length buffer accepted")
		}
		if _, err := c.Memory().Slice(b.Addr, uint64(b.Len)); err != nil {
			t.Fatalf("buffer outside memory accepted: %v", err)
		}
		total += uint64(b.Len)
	}
	if total != c.ReadableLen()+c.WritableLen() || total > 1<<32-1 {
		t.Fatalf("chain lengths %d + %d vs buffers %d", c.ReadableLen(), c.WritableLen(), total)
	}
	// Buffers may overlap, so a chain can claim far more bytes than memory
	// holds: copy a bounded prefix and skip the rest.
	const copyLimit = 16 << 10
	r := c.NewReader()
	n, err := io.Copy(io.Discard, io.LimitReader(r, copyLimit))
	if err != nil || uint64(n) != min(c.ReadableLen(), copyLimit) {
		t.Fatalf("read %d of %d readable bytes: %v", n, c.ReadableLen(), err)
	}
	if r.Discard(c.ReadableLen())+uint64(n) != c.ReadableLen() || r.Remaining() != 0 {
		t.Fatalf("could not consume %d readable bytes", c.ReadableLen())
	}
	w := c.NewWriter()
	if _, err := w.Write(make([]byte, min(c.WritableLen(), copyLimit))); err != nil {
		t.Fatalf("writing within the writable length failed: %v", err)
	}
	if c.WritableLen() > copyLimit {
		if _, err := w.Write(make([]byte, 1)); err != nil {
			t.Fatalf("writing within the writable length failed: %v", err)
		}
	} else if _, err := w.Write([]byte{0}); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("write past the writable length: %v", err)
	}
	if err := q.Push(c, w.Written()); err != nil {
		t.Fatalf("Push: %v", err)
	}
}

// mmioOp encodes one FuzzMMIO step: kind (0 read, 1 write, 2 QueueNotify,
// 3 device-side signal), offset, width exponent and value.
func mmioOp(kind byte, off uint16, width byte, v uint32) []byte {
	b := []byte{kind, byte(off), byte(off >> 8), width, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[4:], v)
	return b
}

// mmioInitSeed is a driver bringing the entropy device up on the queue
// FuzzMMIO prepares in memory, kicking it and handling the interrupt.
func mmioInitSeed() []byte {
	var s []byte
	w := func(off uint16, v uint32) { s = append(s, mmioOp(1, off, 2, v)...) }
	r := func(off uint16) { s = append(s, mmioOp(0, off, 2, 0)...) }
	r(vt.RegMagicValue)
	w(vt.RegStatus, 0)
	w(vt.RegStatus, 1)
	w(vt.RegStatus, 3)
	w(vt.RegDeviceFeaturesSel, 1)
	r(vt.RegDeviceFeatures)
	w(vt.RegDriverFeaturesSel, 1)
	w(vt.RegDriverFeatures, 1)
	w(vt.RegStatus, 0xb)
	w(vt.RegQueueSel, 0)
	r(vt.RegQueueNumMax)
	w(vt.RegQueueNum, 16)
	w(vt.RegQueueDescLow, 0x1000)
	w(vt.RegQueueDriverLow, 0x2000)
	w(vt.RegQueueDeviceLow, 0x3000)
	w(vt.RegQueueReady, 1)
	w(vt.RegStatus, 0xf)
	w(vt.RegQueueNotify, 0)
	r(vt.RegInterruptStatus)
	w(vt.RegInterruptACK, 1)
	s = append(s, mmioOp(0, vt.RegConfig, 3, 0)...)
	w(vt.RegStatus, 0)
	return s
}

// FuzzMMIO drives the transport (with the real entropy device behind it)
// through arbitrary register accesses; nothing may panic, deadlock or race.
func FuzzMMIO(f *testing.F) {
	f.Add(mmioInitSeed())
	f.Add(append(mmioInitSeed()[:17*8], mmioOp(1, vt.RegQueueNum, 2, 3)...))
	f.Add(mmioOp(0, 0x100, 1, 0))

	mem := newMem(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// One writable chain for the device to fill, at the seed's rings.
		clear(mem.Bytes()[:0x10000])
		vt.WriteTableDesc(t, mem, 0x1000, 0, vt.Desc{Addr: 0x8000, Len: 64, Flags: vt.DescWrite})
		avail, _ := mem.Slice(0x2000, 6)
		binary.LittleEndian.PutUint16(avail[2:], 1)

		m := virtio.NewMMIO(rng.New(), mem, vt.NewIRQ())
		runMMIOOps(m, data)
		// State needs a quiesced device: reset it first.
		m.Reset()
		if st := m.State(); st.Status != 0 || st.InterruptStatus != 0 || len(st.Queues) != 1 {
			t.Fatalf("state after reset %+v", st)
		}
	})
}

// runMMIOOps applies FuzzMMIO steps (8 bytes each) to the transport.
func runMMIOOps(m *virtio.MMIO, data []byte) {
	buf := make([]byte, 8)
	for len(data) >= 8 {
		op, off, width := data[0]%4, uint64(binary.LittleEndian.Uint16(data[1:]))%0x1100, 1<<(data[3]%4)
		v := binary.LittleEndian.Uint32(data[4:])
		data = data[8:]
		b := buf[:width]
		switch op {
		case 0:
			m.Read(off, b)
		case 1:
			clear(b)
			binary.LittleEndian.PutUint32(buf[:4], v)
			m.Write(off, b)
		case 2:
			m.QueueNotify(int(int32(v)))
		case 3:
			if v&1 == 0 {
				_ = m.SignalUsed(int(v >> 1))
			} else {
				_ = m.SignalConfigChange()
			}
		}
	}
}

// The FuzzMMIO seed is a real driver: replayed without its final reset it
// activates the device, which fills the prepared chain.
func TestMMIOFuzzSeedActivatesDevice(t *testing.T) {
	mem := newMem(t)
	vt.WriteTableDesc(t, mem, 0x1000, 0, vt.Desc{Addr: 0x8000, Len: 64, Flags: vt.DescWrite})
	avail, _ := mem.Slice(0x2000, 6)
	binary.LittleEndian.PutUint16(avail[2:], 1)
	m := virtio.NewMMIO(rng.New(), mem, vt.NewIRQ())
	defer m.Reset()
	seed := mmioInitSeed()
	runMMIOOps(m, seed[:len(seed)-8])
	if status := vt.NewDriver(t, m, mem).Status(); status&virtio.StatusDriverOK == 0 {
		t.Fatalf("seed did not reach DRIVER_OK: status %#x", status)
	}
	used, _ := mem.Slice(0x3000, 12)
	deadline := time.Now().Add(5 * time.Second)
	for binary.LittleEndian.Uint16(used[2:]) != 1 || binary.LittleEndian.Uint32(used[8:]) != 64 {
		if time.Now().After(deadline) {
			t.Fatalf("device did not complete the chain: used %x", used)
		}
		time.Sleep(time.Millisecond)
	}
}
