package balloon

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/vmm/memory"
)

func TestParseStats(t *testing.T) {
	var b []byte
	add := func(tag uint16, v uint64) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	add(uint16(TagSwapIn), 1)
	add(uint16(TagHugetlbFails), 2)
	add(uint16(TagDirectReclaim), 3)
	add(16, 4)                // unknown
	add(uint16(TagSwapIn), 5) // repeated: the last one counts
	add(0xffff, ^uint64(0))   // unknown
	s, err := parseStats(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{SwapIn: 5, HugetlbFailures: 2, DirectReclaim: 3,
		Supplied: 1<<TagSwapIn | 1<<TagHugetlbFails | 1<<TagDirectReclaim}
	if s != want {
		t.Fatalf("parsed %+v, want %+v", s, want)
	}
	if s, err := parseStats(nil); err != nil || s != (Stats{}) {
		t.Fatalf("empty buffer: %+v, %v", s, err)
	}
	if _, err := parseStats(b[:15]); !errors.Is(err, errMalformedRequest) {
		t.Fatalf("partial entry: %v", err)
	}
}

func TestPageRunsCoalesceAndReject(t *testing.T) {
	inRAM := func(addr uint64) bool { return addr < 100*PageSize }
	runs, rejected := pageRuns([]uint32{5, 6, 7, 200, 8, 8, 50, 99, 100, 0}, inRAM)
	// 200 is rejected, so 8 still extends 5..7; the repeated 8 does not.
	want := []pageRun{{5, 4}, {8, 1}, {50, 1}, {99, 1}, {0, 1}}
	if !reflect.DeepEqual(runs, want) || rejected != 2 {
		t.Fatalf("runs %v rejected %d, want %v and 2", runs, rejected, want)
	}
	if _, err := parsePFNs(make([]byte, 5)); !errors.Is(err, errMalformedRequest) {
		t.Fatalf("5-byte pfn array: %v", err)
	}
}

func TestCheckReportedRange(t *testing.T) {
	mem, err := memory.New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	cases := []struct {
		b        virtio.Buffer
		writable bool
		ok       bool
	}{
		{virtio.Buffer{Addr: 0, Len: 1 << 20}, true, true},
		{virtio.Buffer{Addr: PageSize, Len: PageSize}, false, false},
		{virtio.Buffer{Addr: PageSize, Len: 0}, true, false},
		{virtio.Buffer{Addr: 1, Len: PageSize}, true, false},
		{virtio.Buffer{Addr: 0, Len: PageSize - 1}, true, false},
		{virtio.Buffer{Addr: 1 << 20, Len: PageSize}, true, false},
		{virtio.Buffer{Addr: memory.MMIOHoleStart, Len: PageSize}, true, false},
	}
	for _, c := range cases {
		if err := checkReportedRange(mem, c.b, c.writable); (err == nil) != c.ok {
			t.Errorf("%+v writable=%v: %v", c.b, c.writable, err)
		}
	}
}
