package ninep_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio/ninep"
	vt "github.com/smolvm/smol/virtio/virtiotest"
)

// More 9P2000.L message types.
const (
	tlopen, rlopen = 12, 13
	twalk, rwalk   = 110, 111
	tread, rread   = 116, 117
	twrite, rwrite = 118, 119
)

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// openedFile starts a device serving a directory with one file of size
// bytes and opens it as fid 1 (read-write); it returns the driver side and
// a call that sends one request and waits for its answer (spinning on the
// used ring, not sleeping between looks: the benchmarks time the device).
func openedFile(tb testing.TB, size int) (*vt.Driver, *vt.DriverQueue, func(req []byte, room uint32) vt.UsedElem) {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, size), 0o644); err != nil {
		tb.Fatal(err)
	}
	d := startDevice(tb, dir, 64<<20)
	openData(tb, d, ninep.MaxMessage)
	q := d.Queues[0]
	roundTrip := func(req []byte, room uint32) vt.UsedElem {
		q.AddChain([][]byte{req}, []uint32{room})
		d.Notify(0)
		deadline := time.Now().Add(wait)
		for {
			if u := q.Used(); len(u) == 1 {
				return u[0]
			}
			if time.Now().After(deadline) {
				tb.Fatalf("no answer to a type %d request within %v", req[4], wait)
			}
			runtime.Gosched()
		}
	}
	return d, q, roundTrip
}

// BenchmarkRead512K: Tread of 512 KiB (the guest's msize in smol's mounts)
// through the device, one request in flight, as a sequential read does.
func BenchmarkRead512K(b *testing.B) {
	const chunk = 512 << 10
	_, _, roundTrip := openedFile(b, 8*chunk)
	b.SetBytes(chunk)
	for i := 0; b.Loop(); i++ {
		if u := roundTrip(msg(tread, 2, u32(1), u64(uint64(i%8)*chunk), u32(chunk)), chunk+11); u.Data[4] != rread || u.Len != chunk+11 {
			b.Fatalf("Tread answered %d bytes", u.Len)
		}
	}
}

// BenchmarkWrite512K: Twrite of 512 KiB, one request in flight.
func BenchmarkWrite512K(b *testing.B) {
	const chunk = 512 << 10
	_, _, roundTrip := openedFile(b, 0)
	data := make([]byte, chunk)
	b.SetBytes(chunk)
	for i := 0; b.Loop(); i++ {
		if u := roundTrip(msg(twrite, 2, u32(1), u64(uint64(i%8)*chunk), u32(chunk), data), 64); u.Data[4] != rwrite {
			b.Fatalf("Twrite answered %+v", u)
		}
	}
}
