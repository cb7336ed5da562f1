package memory

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrUnaligned reports a discard whose address or length is not a multiple
// of PageSize: the host can only give back whole pages, and zeroing part of
// a page the guest still uses would corrupt it.
var ErrUnaligned = errors.New("guest range is not page-aligned")

// Discard gives the host pages behind [addr, addr+length) of guest RAM back
// to the host kernel, as a balloon does with pages the guest promised not to
// use. The range must be page-aligned and lie inside one RAM region (like
// Slice, a range that reaches into the MMIO hole is refused); an empty range
// does nothing.
//
// It punches a hole in the memfd (FALLOC_FL_PUNCH_HOLE, keeping its size)
// rather than calling madvise on the VMM's mapping: the hole frees the pages
// for every mapping of the memfd at once — the VMM's and KVM's, whose
// mappings the kernel invalidates — and the mappings stay valid. The next
// access by the guest or the VMM faults in a fresh zero page.
//
// A VM forked from this memfd with a private mapping still reads pages it
// has not copied from it; a discard would zero those too, so the memory of a
// fork's parent must not be discarded while children use it.
func (g *Guest) Discard(addr, length uint64) error {
	if addr%PageSize != 0 || length%PageSize != 0 {
		return fmt.Errorf("discard guest memory [%#x, +%#x): %w", addr, length, ErrUnaligned)
	}
	if length == 0 {
		return nil
	}
	off, err := g.hostOffset(addr, length)
	if err != nil {
		return fmt.Errorf("discard guest memory: %w", err)
	}
	if g.private {
		if err := g.discardPrivate(off, length); err != nil {
			return fmt.Errorf("discard guest memory [%#x, +%#x): map zero pages: %w", addr, length, err)
		}
		return nil
	}
	if err := unix.Fallocate(g.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(length)); err != nil {
		return fmt.Errorf("discard guest memory [%#x, +%#x): punch hole in memfd at %#x: %w", addr, length, off, err)
	}
	return nil
}

// hostOffset returns the memfd offset of [addr, addr+length), which must lie
// in one RAM region; the checks cannot overflow whatever the guest passes.
func (g *Guest) hostOffset(addr, length uint64) (uint64, error) {
	for _, r := range g.regions {
		if addr >= r.GuestAddr && addr-r.GuestAddr <= r.Size && length <= r.Size-(addr-r.GuestAddr) {
			return r.HostOffset + addr - r.GuestAddr, nil
		}
	}
	return 0, fmt.Errorf("%w: [%#x, +%#x)", ErrOutOfRange, addr, length)
}
