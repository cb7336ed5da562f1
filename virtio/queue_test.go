package virtio_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const testMemSize = 16 << 20

func newMem(t testing.TB) *memory.Guest {
	t.Helper()
	mem, err := memory.New(testMemSize)
	if err != nil {
		t.Fatalf("guest memory: %v", err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

type queueOpts struct {
	size     uint16
	eventIdx bool
	indirect bool
}

// newQueuePair lays out a queue in fresh guest memory and binds a device
// Queue to it.
func newQueuePair(t *testing.T, o queueOpts) (*memory.Guest, *virtiotest.DriverQueue, *virtio.Queue) {
	t.Helper()
	if o.size == 0 {
		o.size = 16
	}
	mem := newMem(t)
	dq := virtiotest.NewDriverQueue(t, mem, 0x10000, o.size)
	st := dq.State()
	st.EventIdx, st.IndirectDesc = o.eventIdx, o.indirect
	q, err := virtio.NewQueue(mem, st)
	if err != nil {
		t.Fatalf("NewQueue: %v", err)
	}
	return mem, dq, q
}

func mustPop(t *testing.T, q *virtio.Queue) *virtio.Chain {
	t.Helper()
	c, err := q.Pop()
	if err != nil {
		t.Fatalf("Pop: %v", err)
	}
	if c == nil {
		t.Fatalf("Pop: no chain available")
	}
	return c
}

func bufLens(bufs []virtio.Buffer) []uint32 {
	var out []uint32
	for _, b := range bufs {
		out = append(out, b.Len)
	}
	return out
}

func checkChain(t *testing.T, c *virtio.Chain, wantRead string, wantWritable []uint32) {
	t.Helper()
	got, err := io.ReadAll(c.NewReader())
	if err != nil {
		t.Fatalf("read chain: %v", err)
	}
	if string(got) != wantRead {
		t.Errorf("readable bytes %q, want %q", got, wantRead)
	}
	if c.ReadableLen() != uint64(len(wantRead)) {
		t.Errorf("ReadableLen %d, want %d", c.ReadableLen(), len(wantRead))
	}
	if gl := bufLens(c.Writable()); !equalU32(gl, wantWritable) {
		t.Errorf("writable lengths %v, want %v", gl, wantWritable)
	}
}

func equalU32(a, b []uint32) bool {
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

func TestPopEmptyQueue(t *testing.T) {
	_, _, q := newQueuePair(t, queueOpts{})
	c, err := q.Pop()
	if c != nil || err != nil {
		t.Fatalf("Pop on empty queue = %v, %v; want nil, nil", c, err)
	}
}

func TestDirectChainRoundTrip(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{})
	head := dq.AddChain([][]byte{[]byte("hello"), []byte(" world")}, []uint32{8, 4})
	c := mustPop(t, q)
	if c.Head != head {
		t.Fatalf("head %d, want %d", c.Head, head)
	}
	checkChain(t, c, "hello world", []uint32{8, 4})
	if len(c.Readable()) != 2 {
		t.Errorf("%d readable buffers, want 2", len(c.Readable()))
	}

	w := c.NewWriter()
	if n, err := w.Write([]byte("0123456789ab")); n != 12 || err != nil {
		t.Fatalf("Write 12 bytes = %d, %v", n, err)
	}
	if n, err := w.Write([]byte("X")); n != 0 || !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Write past the end = %d, %v; want 0, ErrShortWrite", n, err)
	}
	if w.Written() != 12 {
		t.Fatalf("Written %d, want 12", w.Written())
	}
	if err := q.Push(c, w.Written()); err != nil {
		t.Fatalf("Push: %v", err)
	}
	used := dq.Used()
	if len(used) != 1 || used[0].Head != head || used[0].Len != 12 || string(used[0].Data) != "0123456789ab" {
		t.Fatalf("used %+v", used)
	}
	if c, err := q.Pop(); c != nil || err != nil {
		t.Fatalf("second Pop = %v, %v", c, err)
	}
}

func TestIndirectChain(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{indirect: true})
	head := dq.AddIndirectChain([][]byte{[]byte("abc"), []byte("def")}, []uint32{3, 5})
	c := mustPop(t, q)
	if c.Head != head {
		t.Fatalf("head %d, want %d", c.Head, head)
	}
	checkChain(t, c, "abcdef", []uint32{3, 5})
	w := c.NewWriter()
	if _, err := w.Write([]byte("xyz12345")); err != nil {
		t.Fatal(err)
	}
	if err := q.Push(c, w.Written()); err != nil {
		t.Fatal(err)
	}
	if u := dq.Used(); len(u) != 1 || string(u[0].Data) != "xyz12345" {
		t.Fatalf("used %+v", u)
	}
}

// A chain of direct descriptors may end in one indirect descriptor (virtio
// 1.2, 2.7.5.3.2).
func TestMixedDirectThenIndirectChain(t *testing.T) {
	mem, dq, q := newQueuePair(t, queueOpts{indirect: true})
	data := dq.Alloc(64)
	dq.Write(data, []byte("directindirect"))
	table := dq.Alloc(32)
	virtiotest.WriteTableDesc(t, mem, table, 0, virtiotest.Desc{Addr: data + 6, Len: 8, Flags: virtiotest.DescNext, Next: 1})
	virtiotest.WriteTableDesc(t, mem, table, 1, virtiotest.Desc{Addr: data + 32, Len: 16, Flags: virtiotest.DescWrite})
	dq.WriteDesc(3, virtiotest.Desc{Addr: data, Len: 6, Flags: virtiotest.DescNext, Next: 7})
	// The WRITE flag on the descriptor that points at the table is ignored.
	dq.WriteDesc(7, virtiotest.Desc{Addr: table, Len: 32, Flags: virtiotest.DescIndirect | virtiotest.DescWrite})
	dq.Publish(3)
	c := mustPop(t, q)
	if c.Head != 3 {
		t.Fatalf("head %d", c.Head)
	}
	checkChain(t, c, "directindirect", []uint32{16})
}

func TestReaderDiscardAndRemaining(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{})
	dq.AddChain([][]byte{[]byte("head"), []byte("erbody")}, nil)
	c := mustPop(t, q)
	r := c.NewReader()
	if got := r.Discard(6); got != 6 {
		t.Fatalf("Discard(6) = %d", got)
	}
	if r.Remaining() != 4 {
		t.Fatalf("Remaining %d, want 4", r.Remaining())
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "body" || r.BytesRead() != 10 {
		t.Fatalf("rest %q, read %d", rest, r.BytesRead())
	}
	if got := r.Discard(5); got != 0 {
		t.Fatalf("Discard at end = %d", got)
	}
}

func TestReaderNextStopsAtBufferBoundaries(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{})
	dq.AddChain([][]byte{[]byte("head"), []byte("erbody")}, []uint32{8})
	r := mustPop(t, q).NewReader()
	var got []string
	for {
		b, err := r.Next(5)
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		got = append(got, string(b))
	}
	if strings.Join(got, "|") != "head|erbod|y" || r.BytesRead() != 10 || r.Remaining() != 0 {
		t.Fatalf("chunks %q, read %d, remaining %d", got, r.BytesRead(), r.Remaining())
	}
	if b, err := r.Next(0); b != nil || err != nil {
		t.Fatalf("Next(0) = %q, %v", b, err)
	}
}

func TestPushRejectsOverlongWritten(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{})
	dq.AddChain(nil, []uint32{4})
	c := mustPop(t, q)
	if err := q.Push(c, 5); err == nil {
		t.Fatal("Push with written > writable length succeeded")
	}
	if err := q.Push(c, 4); err != nil {
		t.Fatalf("Push: %v", err)
	}
}

func TestUsedRingAndIndexWrap(t *testing.T) {
	mem := newMem(t)
	dq := virtiotest.NewDriverQueue(t, mem, 0x10000, 4)
	const start = 65533
	dq.StartAt(start)
	st := dq.State()
	st.NextAvail, st.NextUsed, st.SignalledUsed = start, start, start
	q, err := virtio.NewQueue(mem, st)
	if err != nil {
		t.Fatal(err)
	}
	// Ten chains through a 4-entry queue, crossing the 16-bit wrap.
	for i := range 10 {
		dq.AddChain([][]byte{{byte(i)}}, []uint32{1})
		c := mustPop(t, q)
		b, _ := io.ReadAll(c.NewReader())
		if len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("chain %d carries %v", i, b)
		}
		if _, err := c.NewWriter().Write([]byte{byte(i) ^ 0xff}); err != nil {
			t.Fatal(err)
		}
		if err := q.Push(c, 1); err != nil {
			t.Fatal(err)
		}
		u := dq.Used()
		if len(u) != 1 || u[0].Len != 1 || u[0].Data[0] != byte(i)^0xff {
			t.Fatalf("chain %d used %+v", i, u)
		}
		if want := uint16(start + i + 1); dq.UsedIdx() != want || q.State().NextUsed != want {
			t.Fatalf("used idx %d / %d, want %d", dq.UsedIdx(), q.State().NextUsed, want)
		}
	}
}

func TestAvailRingAtTwoModFour(t *testing.T) {
	mem := newMem(t)
	l := virtiotest.Layout{Desc: 0x10000, Avail: 0x10102, Used: 0x10200, Data: 0x11000, DataSize: 0x10000}
	dq := virtiotest.NewDriverQueueAt(t, mem, l, 16)
	q, err := virtio.NewQueue(mem, dq.State())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		dq.AddChain([][]byte{{byte(i)}}, nil)
		c := mustPop(t, q)
		if b, _ := io.ReadAll(c.NewReader()); len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("chain %d: %v", i, b)
		}
		if err := q.Push(c, 0); err != nil {
			t.Fatal(err)
		}
		dq.Used()
	}
}

func TestNewQueueRejectsBadGeometry(t *testing.T) {
	mem := newMem(t)
	good := virtio.QueueState{Size: 16, Ready: true, DescAddr: 0x1000, AvailAddr: 0x2000, UsedAddr: 0x3000}
	cases := map[string]func(*virtio.QueueState){
		"size zero":               func(s *virtio.QueueState) { s.Size = 0 },
		"size not power of two":   func(s *virtio.QueueState) { s.Size = 24 },
		"size above maximum":      func(s *virtio.QueueState) { s.Size = 65535 },
		"descriptor misaligned":   func(s *virtio.QueueState) { s.DescAddr = 0x1008 },
		"avail misaligned":        func(s *virtio.QueueState) { s.AvailAddr = 0x2001 },
		"used misaligned":         func(s *virtio.QueueState) { s.UsedAddr = 0x3002 },
		"descriptors outside RAM": func(s *virtio.QueueState) { s.DescAddr = testMemSize - 16*8 },
		"used ring outside RAM":   func(s *virtio.QueueState) { s.UsedAddr = 1 << 40 },
		"avail ring wraps":        func(s *virtio.QueueState) { s.AvailAddr = ^uint64(1) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			st := good
			mutate(&st)
			if _, err := virtio.NewQueue(mem, st); !errors.Is(err, virtio.ErrInvalidQueue) {
				t.Fatalf("NewQueue = %v, want ErrInvalidQueue", err)
			}
		})
	}
	if _, err := virtio.NewQueue(mem, good); err != nil {
		t.Fatalf("good geometry: %v", err)
	}
	st := good
	st.Size = virtio.MaxQueueSize
	if _, err := virtio.NewQueue(mem, st); err != nil {
		t.Fatalf("maximum size: %v", err)
	}
	st = good
	st.Ready, st.Size = false, 3
	q, err := virtio.NewQueue(mem, st)
	if err != nil {
		t.Fatalf("not-ready queue: %v", err)
	}
	if c, err := q.Pop(); c != nil || err != nil {
		t.Fatalf("Pop on not-ready queue = %v, %v", c, err)
	}
}

func TestQueueStateRoundTrip(t *testing.T) {
	mem, dq, q := newQueuePair(t, queueOpts{eventIdx: true})
	dq.AddChain([][]byte{[]byte("a")}, nil)
	dq.AddChain([][]byte{[]byte("b")}, nil)
	c := mustPop(t, q)
	if err := q.Push(c, 0); err != nil {
		t.Fatal(err)
	}
	st := q.State()
	if st.NextAvail != 1 || st.NextUsed != 1 || !st.EventIdx {
		t.Fatalf("state %+v", st)
	}
	q2, err := virtio.NewQueue(mem, st)
	if err != nil {
		t.Fatal(err)
	}
	c = mustPop(t, q2)
	if b, _ := io.ReadAll(c.NewReader()); string(b) != "b" {
		t.Fatalf("restored queue popped %q, want b", b)
	}
}

func TestCompleteSignalsWhenWanted(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{})
	irq := virtiotest.NewInterrupter()
	dq.AddChain(nil, []uint32{1})
	if err := q.Complete(mustPop(t, q), 0, irq, 3); err != nil {
		t.Fatal(err)
	}
	if irq.Used(3) != 1 {
		t.Fatalf("%d signals on queue 3, want 1", irq.Used(3))
	}
	dq.SetAvailFlags(virtiotest.AvailNoInterrupt)
	dq.AddChain(nil, []uint32{1})
	if err := q.Complete(mustPop(t, q), 0, irq, 3); err != nil {
		t.Fatal(err)
	}
	if irq.Used(3) != 1 {
		t.Fatalf("signalled despite VIRTQ_AVAIL_F_NO_INTERRUPT")
	}
}

func TestNeedsInterruptWithoutEventIdx(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{})
	if q.NeedsInterrupt() {
		t.Fatal("interrupt wanted with nothing pushed")
	}
	dq.AddChain(nil, []uint32{1})
	dq.AddChain(nil, []uint32{1})
	for range 2 {
		if err := q.Push(mustPop(t, q), 0); err != nil {
			t.Fatal(err)
		}
	}
	if !q.NeedsInterrupt() {
		t.Fatal("no interrupt after a batch of pushes")
	}
	if q.NeedsInterrupt() {
		t.Fatal("interrupt wanted twice for one batch")
	}
}

// EVENT_IDX, device to driver: interrupt only when the used index crosses
// used_event (vring_need_event).
func TestEventIdxSuppressesInterrupts(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{eventIdx: true})
	// NO_INTERRUPT is ignored once EVENT_IDX is negotiated.
	dq.SetAvailFlags(virtiotest.AvailNoInterrupt)
	push := func(n int) {
		t.Helper()
		for range n {
			dq.AddChain(nil, []uint32{1})
			if err := q.Push(mustPop(t, q), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	steps := []struct {
		usedEvent uint16
		pushes    int
		want      bool
	}{
		{0, 1, true},  // used 0→1 crosses event 0
		{0, 1, false}, // used 1→2: event 0 is behind
		{3, 1, false}, // used 2→3: event 3 not reached
		{3, 1, true},  // used 3→4 crosses event 3
		{5, 2, true},  // used 4→6 crosses event 5 within the batch
		{9, 2, false}, // used 6→8: event 9 ahead
	}
	for i, s := range steps {
		dq.SetUsedEvent(s.usedEvent)
		push(s.pushes)
		if got := q.NeedsInterrupt(); got != s.want {
			t.Fatalf("step %d (used_event %d, used idx %d): NeedsInterrupt = %v, want %v", i, s.usedEvent, q.State().NextUsed, got, s.want)
		}
		dq.Used()
	}
}

// EVENT_IDX, driver to device: the device publishes avail_event when it
// runs dry, so the driver notifies for the first new buffer only.
func TestEventIdxAvailEvent(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{eventIdx: true})
	if c, err := q.Pop(); c != nil || err != nil {
		t.Fatalf("Pop = %v, %v", c, err)
	}
	if dq.AvailEvent() != 0 {
		t.Fatalf("avail_event %d after running dry at 0", dq.AvailEvent())
	}
	dq.AddChain(nil, []uint32{1})
	if !dq.NeedsNotify(0) {
		t.Fatal("first buffer after running dry must be notified")
	}
	mustPop(t, q) // the device is busy: it does not update avail_event
	dq.AddChain(nil, []uint32{1})
	if dq.NeedsNotify(1) {
		t.Fatal("second buffer notified while the device had not run dry")
	}
	mustPop(t, q)
	if c, err := q.Pop(); c != nil || err != nil {
		t.Fatalf("Pop = %v, %v", c, err)
	}
	if dq.AvailEvent() != 2 {
		t.Fatalf("avail_event %d after running dry at 2", dq.AvailEvent())
	}
	dq.AddChain(nil, []uint32{1})
	if !dq.NeedsNotify(2) {
		t.Fatal("buffer after running dry again not notified")
	}
}

// Describe names both sides' positions: a stuck queue's diagnosis shows
// whether the driver offered buffers the device did not take, or the
// device used buffers without the interrupt the driver asked for.
func TestQueueDescribe(t *testing.T) {
	_, dq, q := newQueuePair(t, queueOpts{eventIdx: true})
	dq.AddChain(nil, []uint32{1})
	dq.AddChain(nil, []uint32{1})
	dq.AddChain(nil, []uint32{1})
	if err := q.Push(mustPop(t, q), 0); err != nil {
		t.Fatal(err)
	}
	dq.SetUsedEvent(7)
	if got, want := q.Describe(), "avail 3 taken 1 used 1 signalled 0 used_event 7 avail_event 0"; got != want {
		t.Errorf("EVENT_IDX: %q, want %q", got, want)
	}
	_, dq, q = newQueuePair(t, queueOpts{})
	dq.SetAvailFlags(virtiotest.AvailNoInterrupt)
	if got, want := q.Describe(), "avail 0 taken 0 used 0 signalled 0 avail_flags 0x1"; got != want {
		t.Errorf("without EVENT_IDX: %q, want %q", got, want)
	}
	if got := new(virtio.Queue).Describe(); got != "not ready" {
		t.Errorf("a queue never set up: %q", got)
	}
}
