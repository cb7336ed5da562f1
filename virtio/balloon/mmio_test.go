package balloon_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/balloon"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

func TestIdentityFeaturesAndQueues(t *testing.T) {
	e := newEnv(t)
	d := vt.NewDriver(t, e.transport, e.mem)
	if got := d.Read32(vt.RegDeviceID); got != uint32(virtio.IDBalloon) {
		t.Fatalf("device ID %d", got)
	}
	f := d.DeviceFeatures()
	for _, want := range []uint64{balloon.FeatureStatsVQ, balloon.FeatureDeflateOnOOM, balloon.FeatureReporting} {
		if f&want == 0 {
			t.Errorf("feature %#x not offered (%#x)", want, f)
		}
	}
	for _, not := range []uint64{balloon.FeatureMustTellHost, balloon.FeatureFreePageHint, balloon.FeaturePagePoison} {
		if f&not != 0 {
			t.Errorf("feature %#x offered (%#x)", not, f)
		}
	}
	for i := uint32(0); i < 5; i++ {
		d.Write32(vt.RegQueueSel, i)
		want := uint32(balloon.QueueSize)
		if i == balloon.NumQueues {
			want = 0
		}
		if got := d.Read32(vt.RegQueueNumMax); got != want {
			t.Errorf("queue %d: QueueNumMax %d, want %d", i, got, want)
		}
	}
}

func TestConfigSpace(t *testing.T) {
	e := newEnv(t)
	d := e.start(allFeatures, nil)
	cfg := func(off uint64) uint32 { return binary.LittleEndian.Uint32(d.ReadConfig(off, 4)) }
	if got := cfg(0); got != 7 {
		t.Errorf("num_pages %d, want the initial target 7", got)
	}
	d.WriteConfig(4, binary.LittleEndian.AppendUint32(nil, 42))
	if got := e.dev.ActualPages(); got != 42 || cfg(4) != 42 {
		t.Errorf("actual %d after the driver wrote 42 (config reads %d)", got, cfg(4))
	}
	d.WriteConfig(5, []byte{1}) // byte writes land in place
	if got := e.dev.ActualPages(); got != 42+256 {
		t.Errorf("actual %d after a byte write, want %d", got, 42+256)
	}
	d.WriteConfig(0, binary.LittleEndian.AppendUint32(nil, 999))
	d.WriteConfig(8, binary.LittleEndian.AppendUint32(nil, 5))
	if cfg(0) != 7 || e.dev.TargetPages() != 7 || cfg(8) != 0 {
		t.Errorf("driver changed read-only fields: num_pages %d, free_page_hint_cmd_id %d", cfg(0), cfg(8))
	}
	d.WriteConfig(12, binary.LittleEndian.AppendUint32(nil, 0xaa))
	if got := cfg(12); got != 0xaa {
		t.Errorf("poison_val %#x", got)
	}
	if got := binary.LittleEndian.Uint64(d.ReadConfig(16, 8)); got != 0 {
		t.Errorf("config past the end reads %#x", got)
	}
}

func TestInflateDiscardsValidPagesOnly(t *testing.T) {
	e := newEnv(t)
	d := e.start(allFeatures, nil)
	e.fill(dataBase, 32*page, 0xa5)

	first := uint32(dataBase / page)
	pfns := []uint32{
		first, first + 1, first + 2, first + 3, // one run
		memSize / page,                      // just past RAM
		uint32(memory.MMIOHoleStart / page), // in the MMIO hole
		^uint32(0),                          // 16 TiB
		first + 10,                          // a separate page
	}
	q := d.Queues[0]
	head := q.AddChain([][]byte{pfnList(pfns...)}, nil)
	before := e.allocated() // the request itself may have touched a page
	d.Notify(0)
	u := q.WaitUsed(1, wait)[0]
	if u.Head != head || u.Len != 0 {
		t.Errorf("inflate used length %d, want 0", u.Len)
	}
	if !e.irq.Wait(wait) || d.AckInterrupts()&virtio.InterruptUsedBuffer == 0 {
		t.Error("no used-buffer interrupt for the inflate request")
	}
	if freed := before - e.allocated(); freed < 5*page {
		t.Errorf("host backs only %d bytes less after inflating 5 pages", freed)
	}
	if !e.holds(dataBase, 4*page, 0) || !e.holds(dataBase+10*page, page, 0) {
		t.Error("inflated pages do not read as zeroes")
	}
	if !e.holds(dataBase+4*page, 6*page, 0xa5) || !e.holds(dataBase+11*page, 21*page, 0xa5) {
		t.Error("pages not in the balloon lost their contents")
	}
	c := e.dev.Counters()
	if c.InflatedPages != 5 || c.RejectedPages != 3 || c.InflateDiscardedBytes != 5*page || c.DiscardedBytes() != 5*page {
		t.Errorf("counters %+v", c)
	}
	if calls := e.rec.ranges(); len(calls) != 2 || calls[0] != [2]uint64{dataBase, 4 * page} {
		t.Errorf("discards %#x, want the run of 4 pages then the single page", calls)
	}
}

func TestDeflateDiscardsNothing(t *testing.T) {
	e := newEnv(t)
	e.start(allFeatures, nil)
	first := uint32(dataBase / page)
	e.submit(0, [][]byte{pfnList(first, first+1)}, nil)
	e.submit(1, [][]byte{pfnList(first, first+1, ^uint32(0))}, nil)
	c := e.dev.Counters()
	if c.DeflatedPages != 2 || c.RejectedPages != 1 {
		t.Errorf("counters %+v", c)
	}
	if n := len(e.rec.ranges()); n != 1 {
		t.Errorf("%d discards, want only the inflate's", n)
	}
}

func TestMalformedPageRequests(t *testing.T) {
	e := newEnv(t)
	e.start(allFeatures, nil)
	first := uint32(dataBase / page)
	e.fill(dataBase, page, 0x3c)
	cases := map[string]struct {
		readable [][]byte
		writable []uint32
	}{
		"partial pfn":     {[][]byte{append(pfnList(first), 1, 2)}, nil},
		"no pfns":         {nil, []uint32{16}},
		"too many pfns":   {[][]byte{make([]byte, balloon.MaxPFNBytes+4)}, nil},
		"split pfn array": {[][]byte{pfnList(first)[:2], pfnList(first)[2:]}, nil}, // valid: one le32 over two buffers
	}
	for name, c := range cases {
		if u := e.submit(0, c.readable, c.writable); u.Len != 0 {
			t.Errorf("%s: used length %d", name, u.Len)
		}
	}
	c := e.dev.Counters()
	if c.Malformed != 3 || c.InflatedPages != 1 {
		t.Errorf("counters %+v, want 3 malformed and the split request served", c)
	}
	if calls := e.rec.ranges(); len(calls) != 1 || calls[0] != [2]uint64{dataBase, page} {
		t.Errorf("discards %#x", calls)
	}
	// A chain the queue rejects (buffer outside RAM) is skipped; the next
	// is served.
	e.postRaw(0, []vt.Desc{{Addr: memSize - 2, Len: 4}})
	e.submit(0, [][]byte{pfnList(first + 1)}, nil)
	if c := e.dev.Counters(); c.Malformed != 4 || c.InflatedPages != 2 {
		t.Errorf("counters %+v after a malformed chain", c)
	}
}

func TestFreePageReportingReleasesHostMemory(t *testing.T) {
	e := newEnv(t)
	e.start(allFeatures, nil)
	const (
		a    = dataBase
		aLen = 2 << 20
		b    = dataBase + 4<<20
		bLen = 1 << 20
	)
	e.fill(a, aLen+page, 0x11)
	e.fill(b, bLen, 0x22)
	before := e.allocated()

	head := e.postRaw(reportQ, []vt.Desc{
		{Addr: a, Len: aLen, Flags: vt.DescWrite},
		{Addr: b, Len: bLen, Flags: vt.DescWrite},
	})
	e.drv.Notify(reportQ)
	u := e.drv.Queues[reportQ].WaitUsed(1, wait)[0]
	if u.Head != head || u.Len != 0 {
		t.Fatalf("used %+v, want head %d with nothing written", u, head)
	}
	if freed := before - e.allocated(); freed < aLen+bLen {
		t.Errorf("host backs %d bytes less after a report of %d", freed, aLen+bLen)
	}
	// Reading faults pages back in, so this comes after counting.
	if !e.holds(a, aLen, 0) || !e.holds(b, bLen, 0) {
		t.Error("reported ranges do not read as zeroes")
	}
	if !e.holds(a+aLen, page, 0x11) {
		t.Error("the page after a reported range lost its contents")
	}
	if c := e.dev.Counters(); c.ReportedRanges != 2 || c.ReportDiscardedBytes != aLen+bLen || c.RejectedRanges != 0 {
		t.Errorf("counters %+v", c)
	}
}

func TestMalformedReports(t *testing.T) {
	e := newEnv(t)
	e.start(allFeatures, nil)
	const base = dataBase
	e.fill(base, 16*page, 0x5a)
	q := e.drv.Queues[reportQ]

	// One chain mixing a device-readable range, unaligned ranges and one
	// good range: only the good range is discarded, and the chain returns.
	head := e.postRaw(reportQ, []vt.Desc{
		{Addr: base, Len: 2 * page},                               // device-readable
		{Addr: base + 2*page + 8, Len: page, Flags: vt.DescWrite}, // unaligned address
		{Addr: base + 4*page, Len: page + 1, Flags: vt.DescWrite}, // unaligned length
		{Addr: base + 8*page, Len: 2 * page, Flags: vt.DescWrite}, // good
	})
	e.drv.Notify(reportQ)
	if u := q.WaitUsed(1, wait)[0]; u.Head != head || u.Len != 0 {
		t.Fatalf("used %+v", u)
	}
	if !e.holds(base, 8*page, 0x5a) || !e.holds(base+10*page, 6*page, 0x5a) {
		t.Error("a rejected range was discarded")
	}
	if !e.holds(base+8*page, 2*page, 0) {
		t.Error("the good range was not discarded")
	}
	if c := e.dev.Counters(); c.RejectedRanges != 3 || c.ReportedRanges != 1 {
		t.Errorf("counters %+v", c)
	}

	// Chains the queue itself rejects (a zero-length buffer, a range past
	// RAM) are consumed without an answer; the device keeps serving.
	for _, bad := range []vt.Desc{
		{Addr: base, Len: 0, Flags: vt.DescWrite},
		{Addr: memSize - page, Len: 2 * page, Flags: vt.DescWrite},
	} {
		e.postRaw(reportQ, []vt.Desc{bad})
		e.drv.Notify(reportQ)
	}
	head = e.postRaw(reportQ, []vt.Desc{{Addr: base + 12*page, Len: page, Flags: vt.DescWrite}})
	e.drv.Notify(reportQ)
	if u := q.WaitUsed(1, wait); len(u) != 1 || u[0].Head != head {
		t.Fatalf("used %+v, want only the good chain %d", u, head)
	}
	if c := e.dev.Counters(); c.Malformed != 2 || c.ReportedRanges != 2 {
		t.Errorf("counters %+v", c)
	}
	for _, r := range e.rec.ranges() {
		if r[0]%page != 0 || r[1]%page != 0 || r[1] == 0 {
			t.Errorf("discarded an unaligned or empty range %#x", r)
		}
	}
}

// Without STATS_VQ, Linux numbers the reporting queue 2.
func TestReportingQueueWithoutStats(t *testing.T) {
	e := newEnv(t)
	d := e.start(balloon.FeatureReporting, nil)
	if d.Features&balloon.FeatureStatsVQ != 0 || len(d.Queues) != 3 {
		t.Fatalf("features %#x, %d queues", d.Features, len(d.Queues))
	}
	e.fill(dataBase, page, 0x77)
	e.postRaw(2, []vt.Desc{{Addr: dataBase, Len: page, Flags: vt.DescWrite}})
	e.drv.Notify(2)
	e.drv.Queues[2].WaitUsed(1, wait)
	if !e.holds(dataBase, page, 0) || e.dev.Counters().ReportedRanges != 1 {
		t.Error("report on queue 2 was not served as a report")
	}
	if _, _, err := e.dev.RefreshStats(context.Background()); !errors.Is(err, balloon.ErrStatsUnavailable) {
		t.Errorf("RefreshStats without a stats queue: %v", err)
	}
}

func TestStatsRoundTrip(t *testing.T) {
	e := newEnv(t)
	if _, _, err := e.dev.Stats(); !errors.Is(err, balloon.ErrNoStats) {
		t.Fatalf("Stats before any: %v", err)
	}
	// Like Linux, prime the stats queue before DRIVER_OK.
	d := e.start(allFeatures, func(d *vt.Driver) {
		d.Queues[statsQ].AddChain([][]byte{statsBuffer(
			stat{balloon.TagFreeMemory, 100 << 20},
			stat{balloon.TagTotalMemory, 512 << 20},
			stat{99, 12345}, // unknown: ignored
			stat{balloon.TagMajorFaults, 3},
		)}, nil)
	})
	var first time.Time
	waitFor(t, "the primed statistics", func() bool {
		_, at, err := e.dev.Stats()
		first = at
		return err == nil
	})
	s, _, _ := e.dev.Stats()
	if s.FreeMemory != 100<<20 || s.TotalMemory != 512<<20 || s.MajorFaults != 3 {
		t.Errorf("stats %+v", s)
	}
	if !s.Has(balloon.TagFreeMemory) || s.Has(balloon.TagSwapIn) || s.Has(99) {
		t.Errorf("supplied %#x", s.Supplied)
	}
	if got := d.Queues[statsQ].Used(); len(got) != 0 {
		t.Fatalf("device returned the stats buffer unasked: %+v", got)
	}

	type result struct {
		s   balloon.Stats
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		s, at, err := e.dev.RefreshStats(ctx)
		done <- result{s, at, err}
	}()
	// The device asks by returning the buffer, with an interrupt.
	if u := d.Queues[statsQ].WaitUsed(1, wait); u[0].Len != 0 {
		t.Errorf("stats buffer returned with %d bytes written", u[0].Len)
	}
	if !e.irq.Wait(wait) || d.AckInterrupts()&virtio.InterruptUsedBuffer == 0 {
		t.Error("no interrupt for the stats request")
	}
	d.Queues[statsQ].AddChain([][]byte{statsBuffer(
		stat{balloon.TagFreeMemory, 50 << 20},
		stat{balloon.TagTotalMemory, 512 << 20},
		stat{balloon.TagMajorFaults, 4},
	)}, nil)
	d.Notify(statsQ)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.s.FreeMemory != 50<<20 || r.s.MajorFaults != 4 || !r.at.After(first) {
		t.Errorf("refreshed stats %+v at %v (first at %v)", r.s, r.at, first)
	}
	if c := e.dev.Counters(); c.StatsUpdates != 2 {
		t.Errorf("%d stats updates", c.StatsUpdates)
	}

	// A guest that does not answer: the wait ends with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := e.dev.RefreshStats(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RefreshStats with a silent guest: %v", err)
	}
	// A malformed buffer is kept (the guest has no other) but not believed.
	d.Queues[statsQ].WaitUsed(1, wait)
	d.Queues[statsQ].AddChain([][]byte{statsBuffer(stat{balloon.TagFreeMemory, 1})[:7]}, nil)
	d.Notify(statsQ)
	waitFor(t, "the malformed stats buffer", func() bool { return e.dev.Counters().Malformed == 1 })
	if s, _, _ := e.dev.Stats(); s.FreeMemory != 50<<20 {
		t.Errorf("malformed statistics were believed: %+v", s)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	e.dev.RefreshStats(ctx2)
	d.Queues[statsQ].WaitUsed(1, wait) // the malformed buffer comes back on request
}

func TestSetTargetSignalsConfigChange(t *testing.T) {
	e := newEnv(t)
	// Before activation there is nobody to tell; the driver reads it.
	if err := e.dev.SetTargetPages(9); err != nil {
		t.Fatal(err)
	}
	d := e.start(allFeatures, nil)
	if got := binary.LittleEndian.Uint32(d.ReadConfig(0, 4)); got != 9 {
		t.Fatalf("num_pages %d, want 9", got)
	}
	gen := d.Read32(vt.RegConfigGeneration)
	triggers := e.irq.Count()
	if err := e.dev.SetTargetBytes(1<<20 + 1); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(d.ReadConfig(0, 4)); got != 257 {
		t.Errorf("num_pages %d, want 257 (1 MiB + 1 byte rounded up)", got)
	}
	if got := d.Read32(vt.RegConfigGeneration); got == gen {
		t.Error("config generation did not change")
	}
	if e.irq.Count() == triggers || d.AckInterrupts()&virtio.InterruptConfigChange == 0 {
		t.Error("no configuration change interrupt")
	}
	gen, triggers = d.Read32(vt.RegConfigGeneration), e.irq.Count()
	if err := e.dev.SetTargetPages(257); err != nil {
		t.Fatal(err)
	}
	if d.Read32(vt.RegConfigGeneration) != gen || e.irq.Count() != triggers {
		t.Error("an unchanged target signalled a change")
	}
	if err := e.dev.SetTargetBytes(1 << 50); err == nil {
		t.Error("a target beyond 2^32 pages was accepted")
	}
	if e.dev.TargetPages() != 257 {
		t.Errorf("target %d after a refused change", e.dev.TargetPages())
	}
	// After a driver reset the transport still counts generations.
	d.Reset()
	gen = d.Read32(vt.RegConfigGeneration)
	if err := e.dev.SetTargetPages(1); err != nil {
		t.Fatal(err)
	}
	if d.Read32(vt.RegConfigGeneration) == gen {
		t.Error("config generation did not change while the device was reset")
	}
}

func TestResetStopsTheDevice(t *testing.T) {
	e := newEnv(t)
	d := e.start(allFeatures, func(d *vt.Driver) {
		d.Queues[statsQ].AddChain([][]byte{statsBuffer(stat{balloon.TagFreeMemory, 1})}, nil)
	})
	d.WriteConfig(4, binary.LittleEndian.AppendUint32(nil, 3))
	waitFor(t, "statistics", func() bool { _, _, err := e.dev.Stats(); return err == nil })
	d.Reset()
	if e.dev.ActualPages() != 0 || e.dev.TargetPages() != 7 {
		t.Errorf("after reset: actual %d (want 0), target %d (want 7)", e.dev.ActualPages(), e.dev.TargetPages())
	}
	if st := e.dev.State(); st.StatsBufferHeld {
		t.Error("a reset device still holds a stats buffer")
	}
	if _, _, err := e.dev.RefreshStats(context.Background()); !errors.Is(err, balloon.ErrStatsUnavailable) {
		t.Errorf("RefreshStats after reset: %v", err)
	}
	d.Queues[0].AddChain([][]byte{pfnList(dataBase / page)}, nil)
	d.Notify(0)
	e.dev.Notify(0)
	time.Sleep(50 * time.Millisecond)
	if u := d.Queues[0].Used(); len(u) != 0 {
		t.Fatalf("device served %d requests after reset", len(u))
	}
	e.dev.Reset() // idempotent

	// A new driver brings it back.
	e.start(allFeatures, nil)
	e.submit(0, [][]byte{pfnList(dataBase / page)}, nil)
	if c := e.dev.Counters(); c.InflatedPages != 1 {
		t.Errorf("counters %+v", c)
	}
}

// A snapshot taken while the device holds the stats buffer restores into a
// device that returns that buffer on the next request.
func TestStateRestoreKeepsTheStatsBuffer(t *testing.T) {
	e := newEnv(t)
	var head uint16
	d := e.start(allFeatures, func(d *vt.Driver) {
		head = d.Queues[statsQ].AddChain([][]byte{statsBuffer(stat{balloon.TagAvailMemory, 77})}, nil)
	})
	d.WriteConfig(4, binary.LittleEndian.AppendUint32(nil, 5))
	e.submit(0, [][]byte{pfnList(dataBase / page)}, nil)
	waitFor(t, "statistics", func() bool { _, _, err := e.dev.Stats(); return err == nil })
	// The transport's State reads the live queues, so the device must be
	// idle: its last queue update precedes the interrupt waited for here.
	if !e.irq.Wait(wait) {
		t.Fatal("no interrupt for the inflate request")
	}
	if err := e.dev.SetTargetPages(11); err != nil {
		t.Fatal(err)
	}

	mst := e.transport.State()
	st := e.dev.State()
	if !st.StatsBufferHeld || st.StatsBufferHead != head || st.ActualPages != 5 || st.TargetPages != 11 ||
		st.Stats.AvailableMemory != 77 || st.Counters.InflatedPages != 1 {
		t.Fatalf("state %+v", st)
	}
	e.transport.Reset() // the old VM is gone

	dev2, err := balloon.New(balloon.Config{Discarder: e.rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev2.Restore(st); err != nil {
		t.Fatal(err)
	}
	irq2 := vt.NewIRQ()
	t2 := virtio.NewMMIO(dev2, e.mem, irq2)
	t.Cleanup(t2.Reset)
	if err := t2.Restore(mst); err != nil {
		t.Fatal(err)
	}
	if dev2.ActualPages() != 5 || dev2.TargetPages() != 11 || dev2.Counters().InflatedPages != 1 {
		t.Errorf("restored actual %d, target %d, counters %+v", dev2.ActualPages(), dev2.TargetPages(), dev2.Counters())
	}
	if s, _, err := dev2.Stats(); err != nil || s.AvailableMemory != 77 {
		t.Errorf("restored stats %+v, %v", s, err)
	}
	if err := dev2.Restore(st); err == nil {
		t.Error("Restore into an active device succeeded")
	}

	d2 := vt.NewDriver(t, t2, e.mem)
	d2.Queues = d.Queues
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, _, err := dev2.RefreshStats(ctx)
		done <- err
	}()
	if u := d2.Queues[statsQ].WaitUsed(1, wait); u[0].Head != head {
		t.Fatalf("restored device returned head %d, want the held %d", u[0].Head, head)
	}
	d2.Queues[statsQ].AddChain([][]byte{statsBuffer(stat{balloon.TagAvailMemory, 78})}, nil)
	d2.Notify(statsQ)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s, _, _ := dev2.Stats(); s.AvailableMemory != 78 {
		t.Errorf("stats after restore %+v", s)
	}
	// The other queues work too.
	d2.Queues[0].AddChain([][]byte{pfnList(dataBase/page + 1)}, nil)
	d2.Notify(0)
	d2.Queues[0].WaitUsed(1, wait)
}

func TestNewAndActivateValidate(t *testing.T) {
	if _, err := balloon.New(balloon.Config{}); err == nil {
		t.Error("New without a Discarder succeeded")
	}
	mem, err := memory.New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	dev, _ := balloon.New(balloon.Config{Discarder: mem})
	irq := vt.NewInterrupter()
	if err := dev.Activate(virtio.Env{Mem: mem, Interrupt: irq, Queues: make([]*virtio.Queue, 4)}); err == nil {
		t.Error("Activate without inflate and deflate queues succeeded")
	}
	if err := dev.Activate(virtio.Env{Mem: mem, Interrupt: irq, Queues: make([]*virtio.Queue, 2)}); err == nil {
		t.Error("Activate with 2 queues succeeded")
	}
}
