package memory

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

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
	parent, err := New(size)
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
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
	g, err := New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
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
