package blk

import (
	"bytes"
	"encoding/binary"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const waitTimeout = 5 * time.Second

// countingIRQ records the interrupts the device raises.
type countingIRQ struct{ used, config atomic.Int64 }

func (c *countingIRQ) SignalUsed(queue int) error {
	if queue != 0 {
		panic("interrupt for a queue blk does not have")
	}
	c.used.Add(1)
	return nil
}
func (c *countingIRQ) SignalConfigChange() error { c.config.Add(1); return nil }

// rig is a block device activated on a queue that a virtiotest driver
// feeds, over a real guest memory and a real image file.
type rig struct {
	t    *testing.T
	path string
	mem  *memory.Guest
	dev  *Device
	drv  *virtiotest.DriverQueue
	q    *virtio.Queue
	irq  *countingIRQ
}

func newRig(t *testing.T, imageSize int, readOnly bool, features uint64) *rig {
	t.Helper()
	// Cleanups run last-in first-out: the device (and its worker) must stop
	// before guest memory is unmapped.
	mem, err := memory.New(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	path := newImage(t, imageSize)
	disk, err := Open(path, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := New(disk, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.Close(); err != nil {
			t.Error(err)
		}
	})
	r := &rig{t: t, path: path, mem: mem, dev: dev, irq: &countingIRQ{}}
	r.drv = virtiotest.NewDriverQueue(t, mem, 0x10000, QueueSize)
	r.activate(r.drv.State(), features)
	return r
}

func (r *rig) activate(state virtio.QueueState, features uint64) {
	r.t.Helper()
	q, err := virtio.NewQueue(r.mem, state)
	if err != nil {
		r.t.Fatal(err)
	}
	r.q = q
	err = r.dev.Activate(virtio.Env{Mem: r.mem, Features: features, Queues: []*virtio.Queue{q}, Interrupt: r.irq})
	if err != nil {
		r.t.Fatal(err)
	}
}

// do submits one request and waits for its completion.
func (r *rig) do(readable [][]byte, writableLens []uint32) virtiotest.UsedElem {
	r.t.Helper()
	head := r.drv.AddChain(readable, writableLens)
	r.dev.Notify(0)
	used := r.drv.WaitUsed(1, waitTimeout)
	if len(used) != 1 || used[0].Head != head {
		r.t.Fatalf("used %+v, want head %d", used, head)
	}
	return used[0]
}

// status returns the status byte of a completion (the last byte written).
func (r *rig) status(u virtiotest.UsedElem) uint8 {
	r.t.Helper()
	if u.Len == 0 || len(u.Data) != int(u.Len) {
		r.t.Fatalf("completion wrote %d bytes (data %d): no status", u.Len, len(u.Data))
	}
	return u.Data[u.Len-1]
}

func sum(lens []uint32) uint32 {
	var n uint32
	for _, l := range lens {
		n += l
	}
	return n
}

func (r *rig) file() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.path)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

const allFeatures = FeatureFlush | FeatureDiscard | FeatureWriteZeroes | FeatureSegMax | FeatureBlkSize | FeatureSizeMax

func TestWriteThenReadBack(t *testing.T) {
	const size = 64 * SectorSize
	r := newRig(t, size, false, allFeatures)
	data := pattern(3*SectorSize, 0x5a)

	// Header and data split over several readable buffers.
	u := r.do([][]byte{header(TypeOut, 7)[:4], header(TypeOut, 7)[4:], data[:100], data[100:]}, []uint32{1})
	if u.Len != 1 || r.status(u) != StatusOK {
		t.Fatalf("write: len %d status %v", u.Len, u.Data)
	}
	file := r.file()
	if !bytes.Equal(file[7*SectorSize:10*SectorSize], data) {
		t.Error("image does not hold the written sectors")
	}
	if want := pattern(size, 1); !bytes.Equal(file[:7*SectorSize], want[:7*SectorSize]) || !bytes.Equal(file[10*SectorSize:], want[10*SectorSize:]) {
		t.Error("write touched other sectors")
	}

	// Read into two data buffers, the status byte in its own buffer.
	u = r.do([][]byte{header(TypeIn, 7)}, []uint32{SectorSize, 2 * SectorSize, 1})
	if u.Len != 3*SectorSize+1 || r.status(u) != StatusOK {
		t.Fatalf("read: len %d status %d", u.Len, r.status(u))
	}
	if !bytes.Equal(u.Data[:3*SectorSize], data) {
		t.Error("read back differs from what was written")
	}
	// Status byte sharing the last data buffer.
	u = r.do([][]byte{header(TypeIn, 0)}, []uint32{SectorSize + 1})
	if r.status(u) != StatusOK || !bytes.Equal(u.Data[:SectorSize], pattern(size, 1)[:SectorSize]) {
		t.Error("read with status in the data buffer failed")
	}

	u = r.do([][]byte{header(TypeFlush, 0)}, []uint32{1})
	if r.status(u) != StatusOK {
		t.Errorf("flush status %d", r.status(u))
	}
	st := r.dev.Stats()
	if st.Writes != 1 || st.Reads != 2 || st.Flushes != 1 || st.BytesWritten != 3*SectorSize || st.BytesRead != 4*SectorSize {
		t.Errorf("stats %+v", st)
	}
	if r.irq.used.Load() == 0 {
		t.Error("no used-buffer interrupt")
	}
}

func TestRequestErrorsReachTheGuest(t *testing.T) {
	r := newRig(t, 16*SectorSize, false, allFeatures)
	for _, tc := range []struct {
		name     string
		readable [][]byte
		writable []uint32
		status   uint8
	}{
		{"read past the end", [][]byte{header(TypeIn, 15)}, []uint32{2*SectorSize + 1}, StatusIOErr},
		{"odd length", [][]byte{header(TypeOut, 0), make([]byte, 100)}, []uint32{1}, StatusIOErr},
		{"unknown type", [][]byte{header(77, 0)}, []uint32{1}, StatusUnsupp},
		{"short header", [][]byte{header(TypeIn, 0)[:8]}, []uint32{1}, StatusIOErr},
	} {
		u := r.do(tc.readable, tc.writable)
		if want := sum(tc.writable); u.Len != want || r.status(u) != tc.status {
			t.Errorf("%s: len %d status %d, want len %d status %d", tc.name, u.Len, r.status(u), want, tc.status)
		}
	}
	// No status byte: the chain comes back with nothing written.
	if u := r.do([][]byte{header(TypeIn, 0)}, nil); u.Len != 0 {
		t.Errorf("chain without status: used len %d", u.Len)
	}
	st := r.dev.Stats()
	if st.IOErrors != 3 || st.Unsupported != 1 || st.Malformed != 1 {
		t.Errorf("stats %+v", st)
	}
	if !bytes.Equal(r.file(), pattern(16*SectorSize, 1)) {
		t.Error("failed requests changed the image")
	}
}

func TestGetID(t *testing.T) {
	r := newRig(t, 4096, false, allFeatures)
	u := r.do([][]byte{header(TypeGetID, 0)}, []uint32{IDBytes, 1})
	if u.Len != IDBytes+1 || r.status(u) != StatusOK {
		t.Fatalf("len %d status %d", u.Len, r.status(u))
	}
	want := make([]byte, IDBytes)
	copy(want, r.dev.Serial())
	if !bytes.Equal(u.Data[:IDBytes], want) || r.dev.Serial() != r.dev.Disk().Serial() {
		t.Errorf("id %q, want %q", u.Data[:IDBytes], want)
	}

	// A configured serial of exactly 20 bytes has no terminator.
	disk, err := Open(newImage(t, 4096), true)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	if _, err := New(disk, Options{Serial: "this-serial-is-too-long"}); err == nil {
		t.Error("accepted a 23-byte serial")
	}
	dev, err := New(disk, Options{Serial: "ABCDEFGHIJKLMNOPQRST"})
	if err != nil || dev.Serial() != "ABCDEFGHIJKLMNOPQRST" {
		t.Fatalf("New: %v", err)
	}
}

func TestDiscardAndWriteZeroesThroughTheQueue(t *testing.T) {
	const mib = 1 << 20
	r := newRig(t, 4*mib, false, allFeatures)
	if err := r.dev.Disk().Flush(); err != nil {
		t.Fatal(err)
	}
	before := allocatedBytes(t, r.path)
	const spm = mib / SectorSize // sectors per MiB

	u := r.do([][]byte{header(TypeDiscard, 0), seg(0, spm/2, 0), seg(spm/2, spm/2, 0)}, []uint32{1})
	if r.status(u) != StatusOK {
		t.Fatalf("discard status %d", r.status(u))
	}
	u = r.do([][]byte{header(TypeWriteZeroes, 0), seg(spm, spm, 0)}, []uint32{1})
	if r.status(u) != StatusOK {
		t.Fatalf("write zeroes status %d", r.status(u))
	}
	u = r.do([][]byte{header(TypeWriteZeroes, 0), seg(2*spm, spm, flagUnmap)}, []uint32{1})
	if r.status(u) != StatusOK {
		t.Fatalf("write zeroes (unmap) status %d", r.status(u))
	}
	// The unmap flag on a discard is refused (virtio 1.2, 5.2.6.2).
	u = r.do([][]byte{header(TypeDiscard, 0), seg(3*spm, 1, flagUnmap)}, []uint32{1})
	if r.status(u) != StatusUnsupp {
		t.Errorf("discard with unmap: status %d", r.status(u))
	}

	file := r.file()
	if !bytes.Equal(file[:3*mib], make([]byte, 3*mib)) {
		t.Error("discarded and zeroed ranges do not read as zeroes")
	}
	if !bytes.Equal(file[3*mib:], pattern(4*mib, 1)[3*mib:]) {
		t.Error("the last MiB changed")
	}
	if before >= 4*mib {
		if after := allocatedBytes(t, r.path); before-after < 2*mib {
			t.Errorf("discard + unmapped zeroes freed %d bytes, want >= 2 MiB", before-after)
		}
	}
	st := r.dev.Stats()
	if st.Discards != 1 || st.WriteZeroes != 2 || st.Unsupported != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestReadOnlyDeviceRefusesWrites(t *testing.T) {
	r := newRig(t, 8*SectorSize, true, FeatureRO|FeatureFlush|FeatureBlkSize)
	if r.dev.Features()&FeatureRO == 0 || r.dev.Features()&(FeatureDiscard|FeatureWriteZeroes) != 0 {
		t.Errorf("read-only features %#x", r.dev.Features())
	}
	u := r.do([][]byte{header(TypeOut, 0), make([]byte, SectorSize)}, []uint32{1})
	if r.status(u) != StatusIOErr {
		t.Errorf("write status %d, want IOERR", r.status(u))
	}
	u = r.do([][]byte{header(TypeDiscard, 0), seg(0, 1, 0)}, []uint32{1})
	if r.status(u) != StatusUnsupp {
		t.Errorf("discard status %d, want UNSUPP (not offered)", r.status(u))
	}
	u = r.do([][]byte{header(TypeIn, 1)}, []uint32{SectorSize, 1})
	if r.status(u) != StatusOK || !bytes.Equal(u.Data[:SectorSize], pattern(8*SectorSize, 1)[SectorSize:2*SectorSize]) {
		t.Error("read from a read-only disk failed")
	}
	if !bytes.Equal(r.file(), pattern(8*SectorSize, 1)) {
		t.Error("read-only image changed")
	}
}

func TestManyRequestsInFlight(t *testing.T) {
	r := newRig(t, 512*SectorSize, false, allFeatures)
	// Header and data in one buffer: two descriptors per request, so the
	// whole batch fits the 256-entry queue.
	const n = 120
	for i := range n {
		r.drv.AddChain([][]byte{append(header(TypeOut, uint64(i)), bytes.Repeat([]byte{byte(i)}, SectorSize)...)}, []uint32{1})
	}
	r.dev.Notify(0)
	used := r.drv.WaitUsed(n, waitTimeout)
	for _, u := range used {
		if r.status(u) != StatusOK {
			t.Fatalf("request %d failed", u.Head)
		}
	}
	file := r.file()
	for i := range n {
		if !bytes.Equal(file[i*SectorSize:(i+1)*SectorSize], bytes.Repeat([]byte{byte(i)}, SectorSize)) {
			t.Fatalf("sector %d wrong", i)
		}
	}
	if irqs := r.irq.used.Load(); irqs == 0 || irqs > n {
		t.Errorf("%d interrupts for %d requests", irqs, n)
	}
}

func TestNoInterruptWhenTheDriverSuppressesThem(t *testing.T) {
	r := newRig(t, 8*SectorSize, false, allFeatures)
	r.drv.SetAvailFlags(virtiotest.AvailNoInterrupt)
	r.do([][]byte{header(TypeFlush, 0)}, []uint32{1})
	if got := r.irq.used.Load(); got != 0 {
		t.Errorf("%d interrupts despite VIRTQ_AVAIL_F_NO_INTERRUPT", got)
	}
}

func TestResetStopsTheWorkerAndActivateResumes(t *testing.T) {
	r := newRig(t, 8*SectorSize, false, allFeatures)
	r.do([][]byte{header(TypeFlush, 0)}, []uint32{1})
	r.dev.Reset()
	r.dev.Reset() // idempotent

	r.drv.AddChain([][]byte{header(TypeFlush, 0)}, []uint32{1})
	r.dev.Notify(0)
	time.Sleep(50 * time.Millisecond)
	if got := r.drv.Used(); len(got) != 0 {
		t.Fatalf("a reset device completed %d requests", len(got))
	}
	// Resume on the same rings (as a snapshot restore would): the pending
	// request is found without a new Notify.
	r.activate(r.q.State(), allFeatures)
	if u := r.drv.WaitUsed(1, waitTimeout); r.status(u[0]) != StatusOK {
		t.Errorf("status %d after resume", r.status(u[0]))
	}
	if err := r.dev.Activate(virtio.Env{Mem: r.mem, Queues: []*virtio.Queue{r.q}, Interrupt: r.irq}); err == nil {
		t.Error("second Activate succeeded")
	}
}

func TestActivateRejectsMissingQueue(t *testing.T) {
	disk, err := Open(newImage(t, 4096), false)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := New(disk, Options{})
	defer dev.Close()
	mem, _ := memory.New(1 << 20)
	defer mem.Close()
	for _, env := range []virtio.Env{
		{Mem: mem, Interrupt: &countingIRQ{}},
		{Mem: mem, Interrupt: &countingIRQ{}, Queues: []*virtio.Queue{nil}},
		{Mem: mem, Queues: []*virtio.Queue{{}}},
	} {
		if err := dev.Activate(env); err == nil {
			t.Errorf("Activate(%+v) succeeded", env)
		}
	}
}

func TestConfigSpace(t *testing.T) {
	r := newRig(t, 1000*SectorSize+7, false, allFeatures)
	cfg := make([]byte, configSize+8)
	r.dev.ReadConfig(0, cfg)
	le := binary.LittleEndian
	for _, f := range []struct {
		name string
		got  uint64
		want uint64
	}{
		{"capacity", le.Uint64(cfg[0:]), 1000},
		{"size_max", uint64(le.Uint32(cfg[8:])), SizeMax},
		{"seg_max", uint64(le.Uint32(cfg[12:])), SegMax},
		{"blk_size", uint64(le.Uint32(cfg[20:])), 512},
		{"max_discard_sectors", uint64(le.Uint32(cfg[36:])), MaxDiscardSectors},
		{"max_discard_seg", uint64(le.Uint32(cfg[40:])), MaxDiscardSegs},
		{"discard_sector_alignment", uint64(le.Uint32(cfg[44:])), 8},
		{"max_write_zeroes_sectors", uint64(le.Uint32(cfg[48:])), MaxWriteZeroesSectors},
		{"max_write_zeroes_seg", uint64(le.Uint32(cfg[52:])), MaxWriteZeroesSegs},
		{"write_zeroes_may_unmap", uint64(cfg[56]), 1},
		{"past the end", le.Uint64(cfg[configSize:]), 0},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, want %d", f.name, f.got, f.want)
		}
	}
	// Unaligned partial reads see the same bytes; writes change nothing.
	part := make([]byte, 3)
	r.dev.ReadConfig(1, part)
	if !bytes.Equal(part, cfg[1:4]) {
		t.Errorf("partial read %x, want %x", part, cfg[1:4])
	}
	r.dev.WriteConfig(0, []byte{0xff, 0xff, 0xff, 0xff})
	again := make([]byte, configSize)
	r.dev.ReadConfig(0, again)
	if !bytes.Equal(again, cfg[:configSize]) {
		t.Error("WriteConfig changed the config space")
	}
	far := []byte{1, 2}
	r.dev.ReadConfig(1<<40, far)
	if far[0] != 0 || far[1] != 0 {
		t.Error("out-of-range config read not zero")
	}
	if r.dev.ID() != virtio.IDBlock || len(r.dev.QueueSizes()) != 1 || r.dev.QueueSizes()[0] != QueueSize {
		t.Error("wrong ID or queues")
	}
}

func TestStateRoundTrip(t *testing.T) {
	r := newRig(t, 8*SectorSize, false, allFeatures)
	r.do([][]byte{header(TypeIn, 0)}, []uint32{SectorSize + 1})
	s := r.dev.State()
	if s.Sectors != 8 || s.ReadOnly || s.Serial != r.dev.Serial() || s.Stats.Reads != 1 {
		t.Fatalf("state %+v", s)
	}
	if err := r.dev.Restore(s); err == nil {
		t.Error("Restore into an active device succeeded")
	}
	r.dev.Reset()
	bad := s
	bad.Sectors = 9
	if err := r.dev.Restore(bad); err == nil {
		t.Error("Restore with a different capacity succeeded")
	}
	s.Serial = "restored"
	s.Stats.Reads = 41
	if err := r.dev.Restore(s); err != nil {
		t.Fatal(err)
	}
	r.activate(r.q.State(), allFeatures)
	u := r.do([][]byte{header(TypeGetID, 0)}, []uint32{IDBytes + 1})
	if got := string(bytes.TrimRight(u.Data[:IDBytes], "\x00")); got != "restored" {
		t.Errorf("serial after restore %q", got)
	}
	if got := r.dev.State().Stats.Reads; got != 41 {
		t.Errorf("reads after restore %d", got)
	}
}

func TestPauseHoldsRequestsUntilResume(t *testing.T) {
	r := newRig(t, 8*SectorSize, false, allFeatures)
	r.do([][]byte{header(TypeFlush, 0)}, []uint32{1})
	r.dev.Pause()
	before := r.q.State()
	r.drv.AddChain([][]byte{header(TypeFlush, 0)}, []uint32{1})
	r.dev.Notify(0)
	time.Sleep(50 * time.Millisecond)
	if got := r.drv.Used(); len(got) != 0 {
		t.Fatalf("a paused device completed %d requests", len(got))
	}
	if after := r.q.State(); after != before {
		t.Fatalf("queue moved while paused: %+v -> %+v", before, after)
	}
	r.dev.Resume()
	if u := r.drv.WaitUsed(1, waitTimeout); r.status(u[0]) != StatusOK {
		t.Errorf("status %d after resume", r.status(u[0]))
	}
}
