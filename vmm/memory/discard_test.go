package memory

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// allocatedBytes returns how much of the memfd the host kernel has backed
// with pages.
func allocatedBytes(t *testing.T, g *Guest) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(g.FD(), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func fill(t *testing.T, g *Guest, addr, length uint64, b byte) {
	t.Helper()
	s, err := g.Slice(addr, length)
	if err != nil {
		t.Fatal(err)
	}
	for i := range s {
		s[i] = b
	}
}

func TestDiscardReleasesHostPages(t *testing.T) {
	g, err := New(64 * PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	fill(t, g, 0, 32*PageSize, 0xa5)
	before := allocatedBytes(t, g)
	if before < 32*PageSize {
		t.Fatalf("memfd backs %d bytes after writing 32 pages", before)
	}

	if err := g.Discard(8*PageSize, 16*PageSize); err != nil {
		t.Fatal(err)
	}
	after := allocatedBytes(t, g)
	if before-after < 16*PageSize {
		t.Fatalf("memfd backs %d bytes after discarding 16 pages, %d before", after, before)
	}
	// Reading a hole through a shared mapping faults pages back in (shmem
	// allocates on any fault), so the contents are checked after counting.
	s, _ := g.Slice(8*PageSize, 16*PageSize)
	if !bytes.Equal(s, make([]byte, 16*PageSize)) {
		t.Fatal("discarded pages do not read as zeroes through the existing mapping")
	}
	for _, r := range [][2]uint64{{0, 8 * PageSize}, {24 * PageSize, 8 * PageSize}} {
		s, _ := g.Slice(r[0], r[1])
		if !bytes.Equal(s, bytes.Repeat([]byte{0xa5}, int(r[1]))) {
			t.Fatalf("pages around the discarded range at %#x lost their contents", r[0])
		}
	}
	// The mapping stays usable for writes too.
	fill(t, g, 8*PageSize, PageSize, 0x5a)
	if s, _ := g.Slice(8*PageSize, PageSize); s[0] != 0x5a || s[PageSize-1] != 0x5a {
		t.Fatal("write to a discarded page did not stick")
	}
}

func TestDiscardAboveTheHole(t *testing.T) {
	g, err := New(MMIOHoleStart + 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	fill(t, g, MMIOHoleEnd, 1<<20, 0x77)
	before := allocatedBytes(t, g)
	if err := g.Discard(MMIOHoleEnd+PageSize, 1<<20-PageSize); err != nil {
		t.Fatal(err)
	}
	if got := allocatedBytes(t, g); before-got < 1<<20-PageSize {
		t.Fatalf("memfd backs %d bytes after the discard, %d before", got, before)
	}
	if b := g.Bytes()[MMIOHoleStart]; b != 0x77 {
		t.Fatalf("first high page lost its contents: %#x", b)
	}
	if b := g.Bytes()[MMIOHoleStart+PageSize]; b != 0 {
		t.Fatalf("discarded high page reads %#x", b)
	}
}

func TestDiscardRefusesBadRanges(t *testing.T) {
	g, err := New(MMIOHoleStart + 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	fill(t, g, MMIOHoleStart-PageSize, PageSize, 0x11)
	fill(t, g, MMIOHoleEnd, PageSize, 0x22)
	cases := []struct {
		addr, length uint64
		want         error
	}{
		{1, PageSize, ErrUnaligned},
		{0, PageSize + 1, ErrUnaligned},
		{MMIOHoleStart - PageSize, 2 * PageSize, ErrOutOfRange},                             // into the hole
		{MMIOHoleStart - PageSize, MMIOHoleEnd - MMIOHoleStart + 2*PageSize, ErrOutOfRange}, // across the hole
		{MMIOHoleStart, PageSize, ErrOutOfRange},                                            // in the hole
		{MMIOHoleEnd + 1<<20, PageSize, ErrOutOfRange},                                      // past the end
		{MMIOHoleEnd, 1<<20 + PageSize, ErrOutOfRange},                                      // too long
		{^uint64(0) &^ (PageSize - 1), 2 * PageSize, ErrOutOfRange},                         // wraps
		{PageSize, ^uint64(0) &^ (PageSize - 1), ErrOutOfRange},                             // wraps
	}
	for _, c := range cases {
		if err := g.Discard(c.addr, c.length); !errors.Is(err, c.want) {
			t.Errorf("Discard(%#x, %#x) = %v, want %v", c.addr, c.length, err, c.want)
		}
	}
	if g.Bytes()[MMIOHoleStart-PageSize] != 0x11 || g.Bytes()[MMIOHoleStart] != 0x22 {
		t.Fatal("a refused discard changed memory")
	}
	if err := g.Discard(PageSize, 0); err != nil {
		t.Fatalf("empty discard: %v", err)
	}
}
