package memory

import (
	"cmp"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Forking guest RAM without copying it: the children map the memfd
// privately and share its pages until they write them. A private mapping
// of a file still shows the file's later changes on every page it has not
// written itself, so the memfd must never change again once a child maps
// it: Freeze first remaps the parent's own RAM privately over the same
// memfd (its writes become its own copies too), and then seals the memfd
// against every write, hole punch, shrink or growth. From then on the
// memfd is the fork point's RAM for good, the base of every child (and,
// with an overlay of what changed since, of every later fork's).

// Freeze turns g into a private mapping of sealed memfds holding its
// current contents, the fork point its children map. For RAM that is a
// shared mapping of its own memfd (every machine's until its first fork)
// that costs nothing: the mapping is replaced in place, the memfd becomes
// the base of every later fork in its line, and its largest holes are
// mapped anonymous (baseHoles). A private guest over such a base (a
// frozen guest that ran on, a fork's child) folds what it changed since
// into a new overlay (overlay.go): a copy of its changes, not of its RAM.
// A private guest over anything else (a restore's snapshot file, which is
// not sealed) has its contents copied into a new memfd, skipping zero
// pages. The guest must not be running. Freezing a frozen Guest does
// nothing.
func (g *Guest) Freeze() error {
	if g.frozen {
		return nil
	}
	if g.private && g.baseSealed {
		if err := g.foldIntoOverlay(); err != nil {
			return fmt.Errorf("freeze guest memory: %w", err)
		}
		g.frozen = true
		return nil
	}
	if g.private {
		if err := g.copyToNewMemfd(); err != nil {
			return fmt.Errorf("freeze guest memory: %w", err)
		}
	}
	addr := uintptr(unsafe.Pointer(&g.mapping[0]))
	_, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(len(g.mapping)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE, uintptr(g.fd), 0)
	if errno != 0 {
		return fmt.Errorf("remap guest memory privately: %w", errno)
	}
	g.private = true
	if _, err := unix.FcntlInt(uintptr(g.fd), unix.F_ADD_SEALS, forkSeals); err != nil {
		return fmt.Errorf("seal guest memory: %w", err)
	}
	holes, err := baseHoles(g.fd, int64(len(g.mapping)))
	if err != nil {
		return fmt.Errorf("freeze guest memory: %w", err)
	}
	if err := remapRuns(g.mapping, -1, holes); err != nil {
		g.broken = fmt.Errorf("guest memory is in an unknown state after a failed remap, and cannot be forked: %w", err)
		return g.broken
	}
	g.runs = holes
	g.baseSealed, g.frozen = true, true
	return nil
}

// The base's largest holes, the RAM the guest never touched, are mapped
// anonymous in the frozen guest and its children: a write fault on a hole
// of a private mapping of a memfd allocates a zero page in the memfd (the
// base every child shares) before copying it, so a page the guest or a
// child first writes after the fork would cost two. Only the largest
// holes, and few of them, so that the first fork stays a handful of
// mmaps: most of a guest's untouched RAM is in a few large holes.
const (
	minHoleRun  = 2 << 20
	maxHoleRuns = 64
)

// baseHoles returns the holes of the memfd fd (size bytes) of at least
// minHoleRun, the largest maxHoleRuns of them, in order, as zero runs.
func baseHoles(fd int, size int64) ([]Run, error) {
	var holes []Run
	for off := int64(0); off < size; {
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("find the holes of guest memory: %w", err)
		}
		if hole >= size {
			break
		}
		data, err := unix.Seek(fd, hole, unix.SEEK_DATA)
		if err == unix.ENXIO {
			data = size
		} else if err != nil {
			return nil, fmt.Errorf("find the holes of guest memory: %w", err)
		}
		start, end := (hole+PageSize-1)&^(PageSize-1), min(data, size)&^(PageSize-1)
		if end-start >= minHoleRun {
			holes = append(holes, Run{Off: uint64(start), Len: uint64(end - start), Zero: true})
		}
		off = max(data, hole+PageSize)
	}
	if len(holes) > maxHoleRuns {
		slices.SortFunc(holes, func(a, b Run) int { return cmp.Compare(b.Len, a.Len) })
		holes = holes[:maxHoleRuns]
		slices.SortFunc(holes, func(a, b Run) int { return cmp.Compare(a.Off, b.Off) })
	}
	return holes, nil
}

// Thaw records that the guest runs again after a Freeze: its private
// mapping now departs from the fork point, which stays the RAM of the
// children already made. The next Freeze collects what changed; until
// then Fork refuses.
func (g *Guest) Thaw() { g.frozen = false }

// Fork returns a child's RAM: the frozen fork point, mapped privately.
// The child reads the fork point's pages until it writes its own; neither
// it nor g sees the other's writes.
func (g *Guest) Fork() (*Guest, error) {
	base, overlay, runs, err := g.ForkFiles()
	if err != nil {
		return nil, err
	}
	defer base.Close()
	if overlay != nil {
		defer overlay.Close()
	}
	return NewFork(base, overlay, runs, uint64(len(g.mapping)))
}

// copyToNewMemfd puts g's current contents in a new memfd (zero chunks
// left as holes) and makes that g's memfd, in place of the one it had.
func (g *Guest) copyToNewMemfd() error {
	fd, err := unix.MemfdCreate("smol-guest-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(len(g.mapping))); err != nil {
		unix.Close(fd)
		return err
	}
	if err := g.copyChanged(fd); err != nil {
		unix.Close(fd)
		return err
	}
	unix.Close(g.fd)
	g.fd, g.fdOff = fd, 0
	if g.overlay != nil { // a private guest over an unsealed file has none; for certainty
		g.overlay.Close()
		g.overlay = nil
	}
	g.runs = nil
	return nil
}
