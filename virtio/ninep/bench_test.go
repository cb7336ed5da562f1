package ninep_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/ninep"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
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
	mem, err := memory.New(64 << 20)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mem.Close() })
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, size), 0o644); err != nil {
		tb.Fatal(err)
	}
	dev, err := ninep.New(dir, "smol0", false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	d := vt.Init(tb, virtio.NewMMIO(dev, mem, vt.NewIRQ()), mem, vt.Options{})
	tb.Cleanup(d.Reset)
	q := d.Queues[0]
	for _, step := range []struct {
		m    []byte
		want byte
	}{
		{msg(tversion, 0xffff, u32(ninep.MaxMessage), str("9P2000.L")), rversion},
		{msg(tattach, 1, u32(0), u32(^uint32(0)), str("root"), str(""), u32(0)), rattach},
		{msg(twalk, 1, u32(0), u32(1), []byte{1, 0}, str("data")), rwalk},
		{msg(tlopen, 1, u32(1), u32(2)), rlopen}, // O_RDWR
	} {
		q.AddChain([][]byte{step.m}, []uint32{4096})
		d.Notify(0)
		if u := q.WaitUsed(1, wait); len(u) != 1 || u[0].Data[4] != step.want {
			tb.Fatalf("type %d answered %+v", step.m[4], u)
		}
	}
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
