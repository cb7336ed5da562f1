package memory

import (
	"fmt"
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
// that costs nothing: the mapping is replaced in place, and the memfd
// becomes the base of every later fork in its line. A private guest over
// such a base (a frozen guest that ran on, a fork's child) folds what it
// changed since into a new overlay (overlay.go): a copy of its changes,
// not of its RAM. A private guest over anything else (a restore's
// snapshot file, which is not sealed) has its contents copied into a new
// memfd, skipping zero pages. The guest must not be running. Freezing a
// frozen Guest does nothing.
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
	g.baseSealed, g.frozen = true, true
	return nil
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
