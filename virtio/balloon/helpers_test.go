package balloon_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/balloon"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
	"golang.org/x/sys/unix"
)

const (
	wait    = 5 * time.Second
	memSize = 16 << 20
	// dataBase is where tests put the pages they balloon or report, above
	// the queues the driver lays out from virtiotest.DefaultQueueBase.
	dataBase = 8 << 20
	page     = balloon.PageSize
)

// Linux's queue sets: it enables inflateq and deflateq, then statsq and
// reporting_vq as negotiated, numbering them consecutively.
const (
	allFeatures = balloon.FeatureStatsVQ | balloon.FeatureDeflateOnOOM | balloon.FeatureReporting
	statsQ      = 2 // with all features
	reportQ     = 3 // with all features
)

// recorder is the guest memory's Discarder, remembering every range the
// device asked to discard.
type recorder struct {
	mem   *memory.Guest
	mu    sync.Mutex
	calls [][2]uint64
}

func (r *recorder) Discard(addr, length uint64) error {
	r.mu.Lock()
	r.calls = append(r.calls, [2]uint64{addr, length})
	r.mu.Unlock()
	return r.mem.Discard(addr, length)
}

func (r *recorder) ranges() [][2]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][2]uint64(nil), r.calls...)
}

// env is one balloon on a virtio-mmio transport with a driver.
type env struct {
	t         *testing.T
	mem       *memory.Guest
	rec       *recorder
	dev       *balloon.Device
	transport *virtio.MMIO
	irq       *vt.IRQ
	drv       *vt.Driver
	// rawNext is, per queue, the next descriptor index postRaw uses.
	rawNext map[int]uint16
}

func newEnv(t *testing.T) *env {
	t.Helper()
	mem, err := memory.New(memSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	rec := &recorder{mem: mem}
	dev, err := balloon.New(balloon.Config{Discarder: rec, TargetPages: 7})
	if err != nil {
		t.Fatal(err)
	}
	irq := vt.NewIRQ()
	e := &env{t: t, mem: mem, rec: rec, dev: dev, transport: virtio.NewMMIO(dev, mem, irq), irq: irq}
	t.Cleanup(func() {
		e.transport.Reset()
		for _, c := range rec.ranges() {
			if _, err := mem.Slice(c[0], c[1]); err != nil {
				t.Errorf("device discarded [%#x, +%#x), outside guest RAM", c[0], c[1])
			}
		}
	})
	return e
}

// start runs the driver initialisation as Linux's virtio_balloon does:
// negotiate features, enable the queues they call for, let beforeOK post
// buffers (Linux primes the stats queue before DRIVER_OK), set DRIVER_OK.
func (e *env) start(features uint64, beforeOK func(d *vt.Driver)) *vt.Driver {
	t := e.t
	t.Helper()
	d := vt.NewDriver(t, e.transport, e.mem)
	d.Write32(vt.RegStatus, 0)
	d.Write32(vt.RegStatus, virtio.StatusAcknowledge)
	d.Write32(vt.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver)
	d.Features = d.DeviceFeatures() & (features | virtio.FeatureVersion1 | virtio.FeatureRingIndirectDesc | virtio.FeatureRingEventIdx)
	d.WriteDriverFeatures(d.Features)
	status := uint32(virtio.StatusAcknowledge | virtio.StatusDriver | virtio.StatusFeaturesOK)
	d.Write32(vt.RegStatus, status)
	if d.Status()&virtio.StatusFeaturesOK == 0 {
		t.Fatalf("device refused features %#x", d.Features)
	}
	queues := 2
	if d.Features&balloon.FeatureStatsVQ != 0 {
		queues++
	}
	if d.Features&balloon.FeatureReporting != 0 {
		queues++
	}
	base := uint64(vt.DefaultQueueBase)
	for i := 0; i < queues; i++ {
		q := vt.NewDriverQueue(t, e.mem, base, balloon.QueueSize)
		d.SetupQueue(i, q)
		d.Queues = append(d.Queues, q)
		base = (q.Layout().End() + page - 1) &^ (page - 1)
	}
	if base > dataBase {
		t.Fatalf("queues end at %#x, above the test data at %#x", base, dataBase)
	}
	if beforeOK != nil {
		beforeOK(d)
	}
	d.Write32(vt.RegStatus, status|virtio.StatusDriverOK)
	if s := d.Status(); s&virtio.StatusDriverOK == 0 || s&virtio.StatusNeedsReset != 0 {
		t.Fatalf("DRIVER_OK refused: status %#x", s)
	}
	e.drv = d
	return d
}

// allocated returns how much of the memfd the host backs with pages.
func (e *env) allocated() int64 {
	e.t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(e.mem.FD(), &st); err != nil {
		e.t.Fatal(err)
	}
	return st.Blocks * 512
}

func (e *env) fill(addr, length uint64, b byte) {
	e.t.Helper()
	s, err := e.mem.Slice(addr, length)
	if err != nil {
		e.t.Fatal(err)
	}
	copy(s, bytes.Repeat([]byte{b}, int(length)))
}

// holds reports whether [addr, addr+length) is filled with b.
func (e *env) holds(addr, length uint64, b byte) bool {
	e.t.Helper()
	s, err := e.mem.Slice(addr, length)
	if err != nil {
		e.t.Fatal(err)
	}
	return bytes.Equal(s, bytes.Repeat([]byte{b}, int(length)))
}

// submit posts a chain, notifies its queue and waits for the device to
// return it.
func (e *env) submit(queue int, readable [][]byte, writable []uint32) vt.UsedElem {
	e.t.Helper()
	q := e.drv.Queues[queue]
	head := q.AddChain(readable, writable)
	e.drv.Notify(queue)
	u := q.WaitUsed(1, wait)[0]
	if u.Head != head {
		e.t.Fatalf("queue %d returned head %d, want %d", queue, u.Head, head)
	}
	return u
}

// postRaw makes a chain of hand-written descriptors available on queue,
// using fresh descriptor indexes from the top of the table (AddChain
// allocates from the bottom), chaining them in order, and returns its head.
func (e *env) postRaw(queue int, descs []vt.Desc) uint16 {
	e.t.Helper()
	q := e.drv.Queues[queue]
	if e.rawNext == nil {
		e.rawNext = map[int]uint16{}
	}
	next, ok := e.rawNext[queue]
	if !ok {
		next = q.Size() - 1
	}
	head := next
	for i, d := range descs {
		if i+1 < len(descs) {
			d.Flags |= vt.DescNext
			d.Next = next - 1
		}
		q.WriteDesc(next, d)
		next--
	}
	e.rawNext[queue] = next
	q.Publish(head)
	return head
}

func pfnList(pfns ...uint32) []byte {
	b := make([]byte, 4*len(pfns))
	for i, p := range pfns {
		binary.LittleEndian.PutUint32(b[4*i:], p)
	}
	return b
}

type stat struct {
	tag balloon.Tag
	val uint64
}

func statsBuffer(stats ...stat) []byte {
	var b []byte
	for _, s := range stats {
		b = binary.LittleEndian.AppendUint16(b, uint16(s.tag))
		b = binary.LittleEndian.AppendUint64(b, s.val)
	}
	return b
}

// waitFor polls cond until it holds or the test times out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
