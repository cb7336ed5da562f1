package memory

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// newGuest is New(size), closed when the test ends.
func newGuest(t *testing.T, size uint64) *Guest {
	t.Helper()
	g, err := New(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func mustSlice(t *testing.T, g *Guest, addr, n uint64) []byte {
	t.Helper()
	b, err := g.Slice(addr, n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForkedMemoryDiverges: after Freeze the parent and its fork share
// the fork point's pages and neither sees the other's later writes, the
// sealed memfd refuses every way of changing it, and a fork of the fork
// carries the fork's own writes.
func TestForkedMemoryDiverges(t *testing.T) {
	const size = 16 << 20
	parent := newGuest(t, size)
	copy(mustSlice(t, parent, 0x1000, 5), "base!")
	if err := parent.Freeze(); err != nil {
		t.Fatal(err)
	}
	child, err := parent.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	if got := string(mustSlice(t, child, 0x1000, 5)); got != "base!" {
		t.Fatalf("the child reads %q at the fork point", got)
	}
	copy(mustSlice(t, parent, 0x1000, 5), "PARNT")
	copy(mustSlice(t, parent, 0x2000, 5), "later") // a page the child never touched
	copy(mustSlice(t, child, 0x3000, 5), "child")
	if got := string(mustSlice(t, child, 0x1000, 5)); got != "base!" {
		t.Errorf("the child sees the parent's write: %q", got)
	}
	if got := mustSlice(t, child, 0x2000, 5); string(got) != "\x00\x00\x00\x00\x00" {
		t.Errorf("the child sees the parent's write to a page it never read: %q", got)
	}
	if got := mustSlice(t, parent, 0x3000, 5); string(got) != "\x00\x00\x00\x00\x00" {
		t.Errorf("the parent sees the child's write: %q", got)
	}
	// The parent's discard zeroes its page, not the child's.
	if err := parent.Discard(0x1000, PageSize); err != nil {
		t.Fatal(err)
	}
	if got := string(mustSlice(t, child, 0x1000, 5)); got != "base!" {
		t.Errorf("the parent's discard reached the child: %q", got)
	}

	fd := parent.FD()
	if _, err := unix.Pwrite(fd, []byte("x"), 0x1000); !errors.Is(err, unix.EPERM) {
		t.Errorf("write to the sealed memfd: %v", err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, PageSize); !errors.Is(err, unix.EPERM) {
		t.Errorf("punch hole in the sealed memfd: %v", err)
	}
	if err := unix.Ftruncate(fd, PageSize); !errors.Is(err, unix.EPERM) {
		t.Errorf("truncate the sealed memfd: %v", err)
	}
	if m, err := unix.Mmap(fd, 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EPERM) {
		if err == nil {
			unix.Munmap(m)
		}
		t.Errorf("shared writable mapping of the sealed memfd: %v", err)
	}

	// A fork of the fork: the child's own writes are its base.
	if err := child.Freeze(); err != nil {
		t.Fatal(err)
	}
	grandchild, err := child.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer grandchild.Close()
	if got := string(mustSlice(t, grandchild, 0x3000, 5)); got != "child" {
		t.Errorf("the grandchild reads %q where its parent wrote", got)
	}
	if got := string(mustSlice(t, grandchild, 0x1000, 5)); got != "base!" {
		t.Errorf("the grandchild reads %q at the first fork point", got)
	}
}

// TestUnsealedForkLeaks is the negative control: a private mapping of a
// memfd whose owner keeps writing through a shared mapping sees those
// writes on every page it has not written, which is why Freeze exists.
func TestUnsealedForkLeaks(t *testing.T) {
	g := newGuest(t, 1<<20)
	m, err := unix.Mmap(g.FD(), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	copy(mustSlice(t, g, 0x4000, 4), "leak")
	if string(m[0x4000:0x4004]) != "leak" {
		t.Fatal("the unsealed private mapping did not see the owner's write: the control shows nothing")
	}
}

// TestRefreezeAfterTheGuestRanOn: a frozen guest that ran on (wrote a
// page, wrote a page its base never had, had a page discarded) freezes
// again into its base plus an overlay that holds only those changes, not
// the 16 MiB it holds, and without allocating any hole of the base that
// its first child still maps; its own private copies are given back.
func TestRefreezeAfterTheGuestRanOn(t *testing.T) {
	const size = 64 << 20
	g := newGuest(t, size)
	page := func(m *Guest, n uint64) []byte { return mustSlice(t, m, n*PageSize, 4) }
	bulk := mustSlice(t, g, 32<<20, 16<<20)
	for i := range bulk {
		bulk[i] = byte(i/PageSize) | 1
	}
	copy(page(g, 1), "AAAA")
	copy(page(g, 100), "AAAA")
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	first, err := g.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	g.Thaw()
	copy(page(g, 100), "BBBB")
	copy(page(g, 200), "CCCC") // in a hole of the base, mapped anonymous
	if err := g.Discard(1*PageSize, PageSize); err != nil {
		t.Fatal(err)
	}
	baseBlocks := blocks(t, first.fd)
	if _, err := g.Fork(); err == nil {
		t.Fatal("a thawed guest forked without freezing again")
	}
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	// Before anything reads the mappings (a read of a private mapping's
	// hole allocates the page in the file behind it).
	if b := blocks(t, first.fd); b != baseBlocks {
		t.Errorf("the first fork point's memfd grew from %d to %d blocks", baseBlocks, b)
	}
	if b := blocks(t, int(g.overlay.Fd())); b*512 > 4*PageSize {
		t.Errorf("the overlay holds %d bytes for 2 changed pages", b*512)
	}
	if n := changedPages(t, g); n != 0 {
		t.Errorf("the frozen guest still holds %d private pages", n)
	}
	second, err := g.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	for _, c := range []struct {
		m    *Guest
		n    uint64
		want string
	}{
		{second, 1, "\x00\x00\x00\x00"}, {second, 100, "BBBB"}, {second, 200, "CCCC"},
		{first, 1, "AAAA"}, {first, 100, "AAAA"}, {first, 200, "\x00\x00\x00\x00"},
	} {
		if got := string(page(c.m, c.n)); got != c.want {
			t.Errorf("page %d reads %q, want %q", c.n, got, c.want)
		}
	}
	if !bytes.Equal(second.Bytes(), g.Bytes()) {
		t.Error("the second child's memory differs from the parent's")
	}
}

func blocks(t *testing.T, fd int) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

func changedPages(t *testing.T, g *Guest) int {
	t.Helper()
	n := 0
	if err := g.forChangedPages(func(_, len int) error { n += len / PageSize; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
