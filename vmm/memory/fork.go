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
// memfd is the fork point's RAM for good, the base of every child.

// Freeze turns g into a private mapping of a sealed memfd holding its
// current contents. For RAM that is a shared mapping of its own memfd
// (every machine's until its first fork) that costs nothing: the mapping
// is replaced in place. RAM that is already private (a fork's, a
// restore's) has no memfd with its contents, so they are copied into a
// new one first, skipping zero pages: a fork of a fork costs a copy. The
// guest must not be running. Freezing a frozen Guest does nothing.
func (g *Guest) Freeze() error {
	if g.frozen {
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
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(g.fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seal guest memory: %w", err)
	}
	g.frozen = true
	return nil
}

// Thaw records that the guest runs again after a Freeze: its private
// mapping now departs from the sealed memfd, which stays the base of the
// children already made. The next Freeze copies the current contents
// into a new memfd (the cost of forking a parent that ran on, as of
// forking a fork); until then Fork refuses.
func (g *Guest) Thaw() { g.frozen = false }

// Fork returns a child's RAM: a private mapping of g's frozen memfd. The
// child reads the fork point's pages until it writes its own; neither it
// nor g sees the other's writes.
func (g *Guest) Fork() (*Guest, error) {
	if !g.frozen {
		return nil, fmt.Errorf("fork guest memory: freeze it first")
	}
	fd, err := unix.FcntlInt(uintptr(g.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fork guest memory: %w", err)
	}
	m, err := unix.Mmap(fd, 0, len(g.mapping), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map a fork of guest memory: %w", err)
	}
	// The child holds the base memfd (sealed, so harmless) while it maps
	// it; its own RAM is private and not frozen.
	return &Guest{fd: fd, mapping: m, regions: g.Regions(), private: true}, nil
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
	return nil
}
