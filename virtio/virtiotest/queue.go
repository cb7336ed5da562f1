package virtiotest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/smolvm/smol/virtio"
)

// Descriptor and ring flags, for tests that craft descriptors by hand.
const (
	DescNext     = 1
	DescWrite    = 2
	DescIndirect = 4

	AvailNoInterrupt = 1
)

// DefaultDataSize is the size of the data area NewDriverQueue reserves after
// the rings for the buffers and indirect tables of the chains it adds.
const DefaultDataSize = 1 << 20

// Desc is one descriptor as the driver writes it.
type Desc struct {
	Addr  uint64
	Len   uint32
	Flags uint16
	Next  uint16
}

// Layout places a queue's rings and data area in guest memory.
type Layout struct {
	Desc, Avail, Used uint64 // ring addresses
	Data, DataSize    uint64 // area for chain buffers and indirect tables
}

// DefaultLayout packs a queue of the given size at base (16-byte aligned):
// descriptor table, avail ring, used ring (4-byte aligned), then a
// DefaultDataSize data area starting on a page boundary.
func DefaultLayout(base uint64, size uint16) Layout {
	l := Layout{Desc: base}
	l.Avail = l.Desc + 16*uint64(size)
	l.Used = alignUp(l.Avail+6+2*uint64(size), 4)
	l.Data = alignUp(l.Used+6+8*uint64(size), 4096)
	l.DataSize = DefaultDataSize
	return l
}

// End returns the first guest address after the layout's data area.
func (l Layout) End() uint64 { return l.Data + l.DataSize }

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// UsedElem is one used ring entry with the bytes the device wrote.
type UsedElem struct {
	Head uint16
	Len  uint32
	// Data holds the first Len bytes of the chain's writable buffers (nil
	// for heads this DriverQueue did not add through AddChain).
	Data []byte
}

// DriverQueue is the driver's side of one split virtqueue.
type DriverQueue struct {
	tb     testing.TB
	mem    virtio.Memory
	size   uint16
	layout Layout

	cursor   uint64 // next free byte in the data area
	free     []uint16
	inflight map[uint16]inflight
	availIdx uint16
	lastUsed uint16
}

type inflight struct {
	descs      []uint16
	start, end uint64 // data area range the chain uses
	writable   []virtio.Buffer
}

// NewDriverQueue lays out a queue of size descriptors at base with
// DefaultLayout and zeroes its rings.
func NewDriverQueue(tb testing.TB, mem virtio.Memory, base uint64, size uint16) *DriverQueue {
	return NewDriverQueueAt(tb, mem, DefaultLayout(base, size), size)
}

// NewDriverQueueAt lays out a queue with an explicit layout (for tests of
// unusual alignment) and zeroes its rings.
func NewDriverQueueAt(tb testing.TB, mem virtio.Memory, l Layout, size uint16) *DriverQueue {
	tb.Helper()
	d := &DriverQueue{tb: tb, mem: mem, size: size, layout: l, cursor: l.Data, inflight: map[uint16]inflight{}}
	for i := range size {
		d.free = append(d.free, i)
	}
	clear(d.slice(l.Desc, 16*uint64(size)))
	clear(d.slice(l.Avail, 6+2*uint64(size)))
	clear(d.slice(l.Used, 6+8*uint64(size)))
	return d
}

// Size returns the queue size.
func (d *DriverQueue) Size() uint16 { return d.size }

// Layout returns where the queue lives.
func (d *DriverQueue) Layout() Layout { return d.layout }

// State returns the virtio.QueueState a device-side Queue needs to use this
// queue (ready, positions at zero); set EventIdx/IndirectDesc as negotiated.
func (d *DriverQueue) State() virtio.QueueState {
	return virtio.QueueState{Size: d.size, Ready: true, DescAddr: d.layout.Desc, AvailAddr: d.layout.Avail, UsedAddr: d.layout.Used}
}

func (d *DriverQueue) slice(addr, n uint64) []byte {
	d.tb.Helper()
	b, err := d.mem.Slice(addr, n)
	if err != nil {
		d.tb.Fatalf("virtiotest: guest memory [%#x, +%#x): %v", addr, n, err)
	}
	return b
}

// Write copies data into guest memory at addr.
func (d *DriverQueue) Write(addr uint64, data []byte) {
	d.tb.Helper()
	copy(d.slice(addr, uint64(len(data))), data)
}

// Read copies n bytes of guest memory at addr.
func (d *DriverQueue) Read(addr, n uint64) []byte {
	d.tb.Helper()
	return append([]byte(nil), d.slice(addr, n)...)
}

// Alloc reserves n bytes (16-byte aligned) of the data area for the rest of
// the test, for buffers or tables crafted by hand.
func (d *DriverQueue) Alloc(n uint64) uint64 {
	d.tb.Helper()
	addr, ok := d.place(n)
	if !ok {
		d.tb.Fatalf("virtiotest: data area of %d bytes exhausted allocating %d", d.layout.DataSize, n)
	}
	return addr
}

// place finds n bytes in the data area that no in-flight chain uses:
// the first gap from the cursor on, wrapping around to the start once.
func (d *DriverQueue) place(n uint64) (uint64, bool) {
	n = alignUp(max(n, 1), 16)
	start := alignUp(d.cursor, 16)
	for wrapped := false; ; {
		if start+n > d.layout.End() {
			if wrapped {
				return 0, false
			}
			start, wrapped = d.layout.Data, true
			continue
		}
		if end, busy := d.overlapsInflight(start, start+n); busy {
			start = alignUp(end, 16)
			continue
		}
		d.cursor = start + n
		return start, true
	}
}

// overlapsInflight reports whether [start, end) meets an in-flight
// chain's bytes, and where that chain's bytes end.
func (d *DriverQueue) overlapsInflight(start, end uint64) (uint64, bool) {
	for _, c := range d.inflight {
		if start < c.end && c.start < end {
			return c.end, true
		}
	}
	return 0, false
}

// WriteDesc writes descriptor i of the table.
func (d *DriverQueue) WriteDesc(i uint16, desc Desc) {
	d.tb.Helper()
	WriteTableDesc(d.tb, d.mem, d.layout.Desc, i, desc)
}

// WriteTableDesc writes entry i of a descriptor table (main or indirect) at
// table.
func WriteTableDesc(tb testing.TB, mem virtio.Memory, table uint64, i uint16, desc Desc) {
	tb.Helper()
	b, err := mem.Slice(table+16*uint64(i), 16)
	if err != nil {
		tb.Fatalf("virtiotest: descriptor %d at %#x: %v", i, table, err)
	}
	binary.LittleEndian.PutUint64(b[0:], desc.Addr)
	binary.LittleEndian.PutUint32(b[8:], desc.Len)
	binary.LittleEndian.PutUint16(b[12:], desc.Flags)
	binary.LittleEndian.PutUint16(b[14:], desc.Next)
}

// AddChain adds a direct chain of readable buffers holding the given bytes
// followed by writable buffers of the given lengths, makes it available and
// returns its head.
func (d *DriverQueue) AddChain(readable [][]byte, writableLens []uint32) uint16 {
	d.tb.Helper()
	return d.add(readable, writableLens, false)
}

// AddIndirectChain adds the same chain as AddChain but through one
// descriptor pointing at an indirect table.
func (d *DriverQueue) AddIndirectChain(readable [][]byte, writableLens []uint32) uint16 {
	d.tb.Helper()
	return d.add(readable, writableLens, true)
}

func (d *DriverQueue) add(readable [][]byte, writableLens []uint32, indirect bool) uint16 {
	d.tb.Helper()
	n := len(readable) + len(writableLens)
	if n == 0 {
		d.tb.Fatalf("virtiotest: empty chain")
	}
	// Lay out every buffer (and the indirect table) in one data range.
	total := uint64(0)
	for _, r := range readable {
		total += alignUp(uint64(len(r)), 16)
	}
	for _, w := range writableLens {
		total += alignUp(uint64(w), 16)
	}
	if indirect {
		total += 16 * uint64(n)
	}
	start, ok := d.place(total)
	if !ok {
		d.tb.Fatalf("virtiotest: data area exhausted by in-flight chains (need %d bytes)", total)
	}
	descs := make([]Desc, 0, n)
	var writable []virtio.Buffer
	at := start
	for _, r := range readable {
		d.Write(at, r)
		descs = append(descs, Desc{Addr: at, Len: uint32(len(r))})
		at += alignUp(uint64(len(r)), 16)
	}
	for _, w := range writableLens {
		clear(d.slice(at, uint64(w)))
		descs = append(descs, Desc{Addr: at, Len: w, Flags: DescWrite})
		writable = append(writable, virtio.Buffer{Addr: at, Len: w})
		at += alignUp(uint64(w), 16)
	}

	var used []uint16
	if indirect {
		table := at
		for i := range descs {
			if i+1 < len(descs) {
				descs[i].Flags |= DescNext
				descs[i].Next = uint16(i + 1)
			}
			WriteTableDesc(d.tb, d.mem, table, uint16(i), descs[i])
		}
		used = d.takeDescs(1)
		d.WriteDesc(used[0], Desc{Addr: table, Len: uint32(16 * n), Flags: DescIndirect})
	} else {
		used = d.takeDescs(n)
		for i := range descs {
			if i+1 < len(descs) {
				descs[i].Flags |= DescNext
				descs[i].Next = used[i+1]
			}
			d.WriteDesc(used[i], descs[i])
		}
	}
	head := used[0]
	d.inflight[head] = inflight{descs: used, start: start, end: start + alignUp(max(total, 1), 16), writable: writable}
	d.Publish(head)
	return head
}

func (d *DriverQueue) takeDescs(n int) []uint16 {
	d.tb.Helper()
	if len(d.free) < n {
		d.tb.Fatalf("virtiotest: need %d free descriptors, have %d", n, len(d.free))
	}
	got := append([]uint16(nil), d.free[:n]...)
	d.free = d.free[n:]
	return got
}

// Publish puts head in the next avail ring slot and then publishes the new
// avail index (an atomic store, after the ring entry).
func (d *DriverQueue) Publish(head uint16) {
	d.tb.Helper()
	slot := uint64(d.availIdx % d.size)
	binary.LittleEndian.PutUint16(d.slice(d.layout.Avail+4+2*slot, 2), head)
	d.SetAvailIdx(d.availIdx + 1)
}

// PutAvailEntry writes avail ring slot (modulo size) without publishing it.
func (d *DriverQueue) PutAvailEntry(slot uint16, head uint16) {
	d.tb.Helper()
	binary.LittleEndian.PutUint16(d.slice(d.layout.Avail+4+2*uint64(slot%d.size), 2), head)
}

// StartAt moves both ring positions to idx, as if idx chains had already
// been exchanged, for tests of index wrap-around; pair it with a device
// Queue whose state has NextAvail = NextUsed = SignalledUsed = idx.
func (d *DriverQueue) StartAt(idx uint16) {
	d.tb.Helper()
	d.lastUsed = idx
	d.SetAvailIdx(idx)
	w := d.slice(d.layout.Used, 4)
	binary.LittleEndian.PutUint16(w[2:], idx)
}

// AvailIdx returns the avail index the driver published last.
func (d *DriverQueue) AvailIdx() uint16 { return d.availIdx }

// SetAvailIdx publishes an arbitrary avail index (tests of hostile drivers
// use it to jump ahead).
func (d *DriverQueue) SetAvailIdx(idx uint16) {
	d.tb.Helper()
	d.availIdx = idx
	a := d.slice(d.layout.Avail, 4)
	if uintptr(unsafe.Pointer(&a[0]))%4 == 0 {
		flags := binary.LittleEndian.Uint16(a[0:])
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&a[0])), uint32(flags)|uint32(idx)<<16)
		return
	}
	// avail+2 is 4-byte aligned: the word is idx and ring[0].
	w := d.slice(d.layout.Avail+2, 4)
	ring0 := binary.LittleEndian.Uint16(w[2:])
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&w[0])), uint32(idx)|uint32(ring0)<<16)
}

// SetAvailFlags writes the avail ring flags (AvailNoInterrupt).
func (d *DriverQueue) SetAvailFlags(flags uint16) {
	d.tb.Helper()
	binary.LittleEndian.PutUint16(d.slice(d.layout.Avail, 2), flags)
}

// SetUsedEvent writes used_event (EVENT_IDX): the driver wants an interrupt
// once the device's used index passes idx.
func (d *DriverQueue) SetUsedEvent(idx uint16) {
	d.tb.Helper()
	binary.LittleEndian.PutUint16(d.slice(d.layout.Avail+4+2*uint64(d.size), 2), idx)
}

// AvailEvent reads avail_event (EVENT_IDX) from the used ring: the driver
// must notify once it makes avail entry avail_event available.
func (d *DriverQueue) AvailEvent() uint16 {
	d.tb.Helper()
	return binary.LittleEndian.Uint16(d.slice(d.layout.Used+4+8*uint64(d.size), 2))
}

// NeedsNotify applies the driver's EVENT_IDX test: whether moving the avail
// index from old to the current value asks for a notification.
func (d *DriverQueue) NeedsNotify(old uint16) bool {
	d.tb.Helper()
	event := d.AvailEvent()
	return d.availIdx-event-1 < d.availIdx-old
}

// UsedIdx reads the device's used index (atomic load of flags and idx).
func (d *DriverQueue) UsedIdx() uint16 {
	d.tb.Helper()
	w := d.slice(d.layout.Used, 4)
	return uint16(atomic.LoadUint32((*uint32)(unsafe.Pointer(&w[0]))) >> 16)
}

// Used returns the used ring entries added since the previous call, with the
// data the device wrote, and frees their descriptors and data.
func (d *DriverQueue) Used() []UsedElem {
	d.tb.Helper()
	idx := d.UsedIdx()
	var out []UsedElem
	for ; d.lastUsed != idx; d.lastUsed++ {
		slot := uint64(d.lastUsed % d.size)
		e := d.slice(d.layout.Used+4+8*slot, 8)
		u := UsedElem{Head: uint16(binary.LittleEndian.Uint32(e[0:])), Len: binary.LittleEndian.Uint32(e[4:])}
		if c, ok := d.inflight[u.Head]; ok {
			u.Data = d.gather(c.writable, u.Len)
			d.free = append(d.free, c.descs...)
			delete(d.inflight, u.Head)
		}
		out = append(out, u)
	}
	return out
}

func (d *DriverQueue) gather(bufs []virtio.Buffer, n uint32) []byte {
	out := []byte{}
	for _, b := range bufs {
		if n == 0 {
			break
		}
		take := min(n, b.Len)
		out = append(out, d.slice(b.Addr, uint64(take))...)
		n -= take
	}
	return out
}

// WaitUsed polls the used ring until n entries (in total, from this call)
// arrived or timeout passes, and fails the test on timeout.
func (d *DriverQueue) WaitUsed(n int, timeout time.Duration) []UsedElem {
	d.tb.Helper()
	deadline := time.Now().Add(timeout)
	var got []UsedElem
	for {
		got = append(got, d.Used()...)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			d.tb.Fatalf("virtiotest: %d of %d used entries after %v", len(got), n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Inflight returns the number of chains added and not yet seen used.
func (d *DriverQueue) Inflight() int { return len(d.inflight) }
