package memory

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// MMIOHoleStart is where RAM below 4 GiB ends and device space begins.
	MMIOHoleStart uint64 = 0xC000_0000
	// MMIOHoleEnd is the end of device space: RAM resumes here.
	MMIOHoleEnd uint64 = 1 << 32

	// PageSize is the granularity of guest memory sizes.
	PageSize = 4096
)

// ErrOutOfRange reports an access that is not entirely inside guest RAM.
var ErrOutOfRange = errors.New("guest address out of range")

// Region is a contiguous run of guest RAM backed by a contiguous run of the
// memfd (and of the VMM's mapping of it).
type Region struct {
	GuestAddr  uint64 // first guest physical address
	Size       uint64 // bytes
	HostOffset uint64 // offset in the memfd and in Guest.Bytes()
}

// End returns the first guest physical address after the region.
func (r Region) End() uint64 { return r.GuestAddr + r.Size }

// Guest is a VM's RAM.
type Guest struct {
	fd      int   // the memfd, or for a private mapping the file mapped (a fork's base memfd, a snapshot)
	fdOff   int64 // where in fd's file the mapping starts (a snapshot's RAM region)
	mapping []byte
	regions []Region
	private bool // the mapping is private: discards map zero pages
	frozen  bool // the memfd is sealed: the base of forks (fork.go)
	// baseSealed: fd is a sealed memfd, mapped from offset 0 wherever no
	// run says otherwise (a frozen guest's, a fork's); its next freeze
	// only collects what differs from it (overlay.go).
	baseSealed bool
	overlay    *os.File // the sealed memfd mapped over runs' data, or nil
	runs       []Run    // where the mapping does not read fd: overlay or zeros
	broken     error    // a remap failed: never freeze or fork again (fold.go)
}

// New creates size bytes of guest RAM (a multiple of PageSize), untouched.
func New(size uint64) (*Guest, error) {
	if size == 0 || size%PageSize != 0 {
		return nil, fmt.Errorf("guest memory size %d is not a positive multiple of %d", size, PageSize)
	}
	fd, err := unix.MemfdCreate("smol-guest-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("size guest memory to %d bytes: %w", size, err)
	}
	// MAP_NORESERVE: the VMM promises nothing about RAM it has not touched;
	// pages come from the memfd as the guest faults them in.
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map %d bytes of guest memory: %w", size, err)
	}
	return &Guest{fd: fd, mapping: m, regions: Layout(size)}, nil
}

// Layout splits size bytes of RAM around the MMIO hole.
func Layout(size uint64) []Region {
	low := min(size, MMIOHoleStart)
	regions := []Region{{GuestAddr: 0, Size: low, HostOffset: 0}}
	if size > low {
		regions = append(regions, Region{GuestAddr: MMIOHoleEnd, Size: size - low, HostOffset: low})
	}
	return regions
}

// Size returns the amount of RAM in bytes.
func (g *Guest) Size() uint64 { return uint64(len(g.mapping)) }

// Regions returns the RAM regions in ascending guest address order.
func (g *Guest) Regions() []Region { return append([]Region(nil), g.regions...) }

// LowEnd returns the first address after RAM below 4 GiB.
func (g *Guest) LowEnd() uint64 { return g.regions[0].End() }

// ContentFile returns the memfd as a file while it holds the guest's
// contents (its RAM is a shared mapping of it, as until a first fork), so
// that a snapshot can read only the pages the guest touched (SEEK_DATA);
// nil otherwise. The caller closes it; g's own descriptor stays open.
func (g *Guest) ContentFile() *os.File {
	if g.private || g.fd < 0 {
		return nil
	}
	fd, err := unix.FcntlInt(uintptr(g.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "smol-guest-ram")
}

// FD returns the memfd behind guest RAM (for KVM slots, snapshots and forks).
func (g *Guest) FD() int { return g.fd }

// Bytes returns the VMM's whole mapping of guest RAM, in memfd order.
func (g *Guest) Bytes() []byte { return g.mapping }

// Slice returns the host view of [addr, addr+length), which must lie in one
// RAM region. The slice aliases guest memory: the guest can change it at any
// time, so callers copy out what they validate before they use it.
func (g *Guest) Slice(addr, length uint64) ([]byte, error) {
	for _, r := range g.regions {
		if addr >= r.GuestAddr && addr-r.GuestAddr <= r.Size && length <= r.Size-(addr-r.GuestAddr) {
			off := r.HostOffset + addr - r.GuestAddr
			return g.mapping[off : off+length : off+length], nil
		}
	}
	return nil, fmt.Errorf("%w: [%#x, +%#x)", ErrOutOfRange, addr, length)
}

// ReadAt copies guest memory at guest physical address off into p.
func (g *Guest) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative address", ErrOutOfRange)
	}
	s, err := g.Slice(uint64(off), uint64(len(p)))
	if err != nil {
		return 0, err
	}
	return copy(p, s), nil
}

// WriteAt copies p into guest memory at guest physical address off.
func (g *Guest) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative address", ErrOutOfRange)
	}
	s, err := g.Slice(uint64(off), uint64(len(p)))
	if err != nil {
		return 0, err
	}
	return copy(s, p), nil
}

// Close unmaps guest memory and closes the memfd. Slices obtained earlier
// must not be used afterwards.
func (g *Guest) Close() error {
	var err error
	if g.mapping != nil {
		err = unix.Munmap(g.mapping)
		g.mapping = nil
	}
	if g.fd >= 0 {
		if cerr := unix.Close(g.fd); err == nil {
			err = cerr
		}
		g.fd = -1
	}
	if g.overlay != nil {
		g.overlay.Close()
		g.overlay = nil
	}
	return err
}
