package ninep_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	vt "github.com/smolvm/smol/virtio/virtiotest"
)

// split cuts b into 1 to 4 pieces at random points, as a driver's
// scatter-gather list may (Linux puts a zero-copy read's 11-byte reply
// header in a buffer of its own, and the data in page-sized pieces).
func split(r *rand.Rand, b []byte) [][]byte {
	var out [][]byte
	for _, n := range splitLen(r, uint32(len(b))) {
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// splitLen cuts a length of n into 1 to 4 non-empty pieces (split's
// cuts, and the lengths of writable buffers).
func splitLen(r *rand.Rand, n uint32) []uint32 {
	var out []uint32
	for pieces := r.IntN(4); pieces > 0 && n > 1; pieces-- {
		at := 1 + uint32(r.IntN(int(n-1)))
		out = append(out, at)
		n -= at
	}
	return append(out, n)
}

// TestDeviceManyRequestsInFlight: rounds of 40 reads and writes in flight
// at once, each request and reply spread over buffers cut at random
// points (headers included), answered in whatever order the server
// finishes them: every reply reaches its own chain whole, every read
// returns the file's bytes and every write lands where it was sent.
func TestDeviceManyRequestsInFlight(t *testing.T) {
	const (
		fixed    = 128 << 10 // read, never written
		writable = 256 << 10 // written in rounds, never read until the end
		inFlight = 40
		maxCount = 4096
	)
	r := rand.New(rand.NewPCG(1, 2))
	content := make([]byte, fixed+writable)
	for i := range content {
		content[i] = byte(r.Uint32())
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDevice(t, dir, 16<<20)
	openData(t, d, 64<<10)
	q := d.Queues[0]

	type expect struct {
		tag  uint16
		read []byte // a Tread's data; nil for a Twrite
		n    uint32 // a Twrite's count
	}
	for round := 0; round < 60; round++ {
		want := map[uint16]expect{}
		slots := r.Perm(writable / maxCount) // each write its own slot this round
		for i := 0; i < inFlight; i++ {
			tag := uint16(10 + i)
			count := uint32(1 + r.IntN(maxCount))
			var req []byte
			var room uint32
			var e expect
			if r.IntN(3) > 0 {
				off := uint64(r.IntN(fixed - int(count)))
				req = msg(tread, tag, u32(1), u64(off), u32(count))
				room = 11 + count
				e = expect{tag: tag, read: content[off : off+uint64(count)]}
			} else {
				off := uint64(fixed + slots[i]*maxCount)
				data := make([]byte, count)
				for j := range data {
					data[j] = byte(r.Uint32())
				}
				copy(content[off:], data)
				req = msg(twrite, tag, u32(1), u64(off), u32(count), data)
				room = 11
				e = expect{tag: tag, n: count}
			}
			want[q.AddIndirectChain(split(r, req), splitLen(r, room))] = e
			if r.IntN(8) == 0 {
				d.Notify(0) // some requests reach the device while others are being added
			}
		}
		d.Notify(0)
		for _, u := range q.WaitUsed(inFlight, wait) {
			e, ok := want[u.Head]
			if !ok {
				t.Fatalf("round %d: an answer for chain %d, which is not in flight", round, u.Head)
			}
			delete(want, u.Head)
			if u.Len < 7 || binary.LittleEndian.Uint32(u.Data) != u.Len || binary.LittleEndian.Uint16(u.Data[5:]) != e.tag {
				t.Fatalf("round %d: chain %d (tag %d) got a %d-byte answer % x", round, u.Head, e.tag, u.Len, u.Data[:min(len(u.Data), 16)])
			}
			switch {
			case e.read != nil:
				if u.Data[4] != rread || !bytes.Equal(u.Data[11:], e.read) {
					t.Fatalf("round %d: tag %d read the wrong bytes (type %d, %d bytes)", round, e.tag, u.Data[4], u.Len)
				}
			default:
				if u.Data[4] != rwrite || binary.LittleEndian.Uint32(u.Data[7:]) != e.n {
					t.Fatalf("round %d: tag %d write answered % x", round, e.tag, u.Data)
				}
			}
		}
		if len(want) != 0 {
			t.Fatalf("round %d: %d requests unanswered", round, len(want))
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Fatal("the file does not hold what the writes sent")
	}
}

// TestDeviceResetWithRequestsInFlight: a reset while reads are being
// answered returns, and once it has returned the device writes nothing
// more into guest memory (the server's goroutines outlive the worker,
// and the memory may be the guest's for something else by then).
func TestDeviceResetWithRequestsInFlight(t *testing.T) {
	for round := 0; round < 20; round++ {
		d, q := readsInFlight(t)
		d.Reset()
		if !guestMemoryStill(q) {
			t.Fatalf("round %d: guest memory changed after the reset returned", round)
		}
	}
}

// The reads that readsInFlight sends: inFlightReads of inFlightChunk
// bytes each, of a file of 0xa5 bytes.
const inFlightChunk, inFlightReads = 24 << 10, 32

// readsInFlight starts a device serving a file of 0xa5 bytes and sends it
// inFlightReads reads at once, enough to keep the server busy.
func readsInFlight(t *testing.T) (*vt.Driver, *vt.DriverQueue) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), bytes.Repeat([]byte{0xa5}, 8*inFlightChunk), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDevice(t, dir, 16<<20)
	openData(t, d, 64<<10)
	q := d.Queues[0]
	for i := 0; i < inFlightReads; i++ {
		q.AddChain([][]byte{msg(tread, uint16(10+i), u32(1), u64(uint64(i%8)*inFlightChunk), u32(inFlightChunk))}, []uint32{11 + inFlightChunk})
	}
	d.Notify(0)
	return d, q
}

// guestMemoryStill tells whether the queue's data area stays unchanged
// for 20 ms.
func guestMemoryStill(q *vt.DriverQueue) bool {
	l := q.Layout()
	before := bytes.Clone(q.Read(l.Data, l.DataSize))
	time.Sleep(20 * time.Millisecond)
	return bytes.Equal(q.Read(l.Data, l.DataSize), before)
}

// TestDevicePauseWithRequestsInFlight: a pause while reads are being
// answered returns, the paused device writes nothing into guest memory
// (a snapshot or a fork reads it then: the server's goroutines must wait
// too, not only the worker), and after the resume every read is answered
// with the file's bytes.
func TestDevicePauseWithRequestsInFlight(t *testing.T) {
	const chunk = inFlightChunk
	for round := 0; round < 10; round++ {
		d, q := readsInFlight(t)
		pauser := d.Transport.(interface {
			Pause()
			Resume()
		})
		// Pause once the server has begun answering: the rest of the
		// reads are then with the server, or on their way to it.
		answered := q.WaitUsed(1, wait)
		pauser.Pause()
		if !guestMemoryStill(q) {
			t.Fatalf("round %d: guest memory changed while the device was paused", round)
		}
		pauser.Resume()
		for _, u := range append(answered, q.WaitUsed(inFlightReads-len(answered), wait)...) {
			if u.Len != 11+chunk || u.Data[4] != rread || !bytes.Equal(u.Data[11:], bytes.Repeat([]byte{0xa5}, chunk)) {
				t.Fatalf("round %d: a read answered %d bytes, type %d, after the resume", round, u.Len, u.Data[4])
			}
		}
	}
}
