package balloon

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/vmm/memory"
)

// FuzzParseStats feeds the statistics parser arbitrary driver buffers. It
// must not panic, must refuse partial entries, and what it accepts must be
// the last value of every known tag with exactly those tags marked.
func FuzzParseStats(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{4, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 99, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseStats(data)
		if len(data)%statEntryBytes != 0 {
			if !errors.Is(err, errMalformedRequest) {
				t.Fatalf("%d bytes accepted: %v", len(data), err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var want [numTags]uint64
		var supplied uint32
		for off := 0; off < len(data); off += statEntryBytes {
			tag := binary.LittleEndian.Uint16(data[off:])
			if tag < numTags {
				want[tag] = binary.LittleEndian.Uint64(data[off+2:])
				supplied |= 1 << tag
			}
		}
		got := [numTags]uint64{
			s.SwapIn, s.SwapOut, s.MajorFaults, s.MinorFaults,
			s.FreeMemory, s.TotalMemory, s.AvailableMemory, s.DiskCaches,
			s.HugetlbAllocations, s.HugetlbFailures, s.OOMKills, s.AllocStalls,
			s.AsyncScan, s.DirectScan, s.AsyncReclaim, s.DirectReclaim,
		}
		if got != want || s.Supplied != supplied {
			t.Fatalf("parsed %v supplied %#x, want %v supplied %#x", got, s.Supplied, want, supplied)
		}
	})
}

// FuzzPageRuns feeds an inflate request's page frame numbers through the
// parser and the run builder against guest memory with both RAM regions.
// Every run must lie in guest RAM, the runs must hold exactly the valid
// page frame numbers in order, and adjacent runs must not be mergeable.
func FuzzPageRuns(f *testing.F) {
	mem, err := memory.New(memory.MMIOHoleStart + 64<<10)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })
	le := func(pfns ...uint32) []byte {
		var b []byte
		for _, p := range pfns {
			b = binary.LittleEndian.AppendUint32(b, p)
		}
		return b
	}
	hole := uint32(memory.MMIOHoleStart / PageSize)
	high := uint32(memory.MMIOHoleEnd / PageSize)
	f.Add(le(1, 2, 3, 10))
	f.Add(le(hole-2, hole-1, hole, high, high+1, high+16))
	f.Add(le(^uint32(0), 0, 0))
	f.Add([]byte{1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		pfns, err := parsePFNs(data)
		if len(data)%pfnBytes != 0 {
			if !errors.Is(err, errMalformedRequest) {
				t.Fatalf("%d bytes accepted: %v", len(data), err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		inRAM := func(addr uint64) bool { return pageInRAM(mem, addr) }
		runs, rejected := pageRuns(pfns, inRAM)
		var valid, expanded []uint64
		for _, p := range pfns {
			if inRAM(uint64(p) * PageSize) {
				valid = append(valid, uint64(p))
			}
		}
		for i, r := range runs {
			if r.count == 0 {
				t.Fatalf("empty run %v", r)
			}
			if _, err := mem.Slice(r.addr(), r.length()); err != nil {
				t.Fatalf("run %v leaves guest RAM: %v", r, err)
			}
			if i > 0 && runs[i-1].first+runs[i-1].count == r.first {
				t.Fatalf("runs %v and %v should be one", runs[i-1], r)
			}
			for p := r.first; p < r.first+r.count; p++ {
				expanded = append(expanded, p)
			}
		}
		if rejected+len(valid) != len(pfns) || len(expanded) != len(valid) {
			t.Fatalf("%d pfns: %d valid, %d in runs, %d rejected", len(pfns), len(valid), len(expanded), rejected)
		}
		for i := range valid {
			if valid[i] != expanded[i] {
				t.Fatalf("runs hold %v, want %v", expanded, valid)
			}
		}
	})
}

// FuzzReportedRange checks that a reported range is accepted only when
// discarding it is safe: device-writable, non-empty, page-aligned guest RAM.
func FuzzReportedRange(f *testing.F) {
	mem, err := memory.New(memory.MMIOHoleStart + 64<<10)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })
	f.Add(uint64(0), uint32(2<<20), true)
	f.Add(memory.MMIOHoleStart-PageSize, uint32(2*PageSize), true)
	f.Add(memory.MMIOHoleEnd, uint32(64<<10), true)
	f.Add(uint64(PageSize), uint32(PageSize), false)
	f.Fuzz(func(t *testing.T, addr uint64, length uint32, writable bool) {
		err := checkReportedRange(mem, virtio.Buffer{Addr: addr, Len: length}, writable)
		if err != nil {
			return
		}
		if !writable || length == 0 || addr%PageSize != 0 || length%PageSize != 0 {
			t.Fatalf("accepted [%#x, +%#x) writable=%v", addr, length, writable)
		}
		if _, err := mem.Slice(addr, uint64(length)); err != nil {
			t.Fatalf("accepted [%#x, +%#x) outside guest RAM", addr, length)
		}
	})
}
