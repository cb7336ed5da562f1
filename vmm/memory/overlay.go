package memory

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A guest that ran on after its first fork, and every fork's child, is a
// private mapping of a base: the first fork point's sealed memfd. What it
// changed since lives in its own anonymous pages. Forking it again must
// hand the new children its RAM as it is now, while the earlier children
// still map the base; copying everything the guest holds into a new memfd
// would cost a later fork what the guest has touched (seconds for a guest
// holding gigabytes). Instead, Freeze collects only what differs from
// the base into a second sealed memfd, the overlay, and remaps the
// guest's changed ranges (runs) from it: a child is the base mapped
// privately with the overlay's runs mapped privately over it, and the
// runs that read as zeros mapped anonymous. A later fork then costs what
// changed since the base.
//
// The base stays the first fork point for the guest's whole line of
// descent: a fork of a fork has the same base and its own overlay, so no
// chain of overlays builds up.

// Run is a range of guest RAM, by offset in the memfd layout (Bytes), that
// does not read from the base: its pages come from the overlay, at the
// same offset, or (Zero) are zeros, mapped anonymous.
type Run struct {
	Off, Len uint64
	Zero     bool
}

// End returns the offset after the run.
func (r Run) End() uint64 { return r.Off + r.Len }

// MaxRuns bounds a fork's runs: each is a mapping (a VMA) in the guest and
// in every child, and a process has at most vm.max_map_count of them
// (65530 by default). Runs closer together are merged (the base pages
// between them copied into the overlay) until at most MaxRuns remain.
const MaxRuns = 4096

// forkSeals make a memfd a fork point for good: no write, punch, shrink,
// growth, or change of seals.
const forkSeals = unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// mapRuns maps fd's pages privately over m's runs, at the same offsets,
// and anonymous zero pages over its zero runs.
func mapRuns(m []byte, fd int, runs []Run) error {
	for _, r := range runs {
		addr := uintptr(unsafe.Pointer(&m[r.Off]))
		var errno unix.Errno
		if r.Zero {
			_, _, errno = unix.Syscall6(unix.SYS_MMAP, addr, uintptr(r.Len), unix.PROT_READ|unix.PROT_WRITE,
				unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE, ^uintptr(0), 0)
		} else {
			_, _, errno = unix.Syscall6(unix.SYS_MMAP, addr, uintptr(r.Len), unix.PROT_READ|unix.PROT_WRITE,
				unix.MAP_PRIVATE|unix.MAP_FIXED|unix.MAP_NORESERVE, uintptr(fd), uintptr(r.Off))
		}
		if errno != 0 {
			return fmt.Errorf("map the overlay's run [%#x, +%#x): %w", r.Off, r.Len, errno)
		}
	}
	return nil
}

// NewFork maps a fork's RAM, size bytes, as a child in another process
// gets it (ForkFiles): base, a sealed memfd, mapped privately, with the
// sealed overlay's runs mapped privately over it and its zero runs mapped
// anonymous. Both files are checked: sealed against every change (else
// the child would see its parent's later writes), large enough (else a
// guest access would be a SIGBUS), and the runs page-aligned, in order,
// inside the RAM and at most MaxRuns. The files are the caller's to
// close.
func NewFork(base, overlay *os.File, runs []Run, size uint64) (*Guest, error) {
	if size == 0 || size%PageSize != 0 {
		return nil, fmt.Errorf("a fork's RAM of %d bytes: not a positive multiple of %d", size, PageSize)
	}
	if err := checkForkFile(base, size); err != nil {
		return nil, err
	}
	if err := checkRuns(runs, size); err != nil {
		return nil, err
	}
	data := false
	for _, r := range runs {
		data = data || !r.Zero
	}
	switch {
	case data && overlay == nil:
		return nil, fmt.Errorf("a fork's RAM has %d runs and no overlay to read them from", len(runs))
	case overlay != nil:
		if err := checkForkFile(overlay, size); err != nil {
			return nil, err
		}
	}
	m, err := unix.Mmap(int(base.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map a fork's RAM: %w", err)
	}
	g := &Guest{fd: -1, mapping: m, regions: Layout(size), private: true, baseSealed: true, runs: runs}
	overlayFD := -1 // with zero runs only
	if overlay != nil {
		overlayFD = int(overlay.Fd())
	}
	if err := mapRuns(m, overlayFD, runs); err != nil {
		g.Close()
		return nil, err
	}
	if overlay != nil {
		// Kept for this guest's own forks (Fork hands it on while it is
		// frozen); its next freeze folds it into a new one.
		if g.overlay, err = dupFile(overlay); err != nil {
			g.Close()
			return nil, err
		}
	}
	// The base, for this guest's own forks and freezes.
	fd, err := unix.FcntlInt(base.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.fd = fd
	return g, nil
}

// checkForkFile refuses a file that is not a memfd sealed as a fork point
// or is shorter than size.
func checkForkFile(f *os.File, size uint64) error {
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("a fork's RAM (%s) is not a sealed memfd: %w", f.Name(), err)
	}
	if seals&forkSeals != forkSeals {
		return fmt.Errorf("a fork's RAM (%s) is not sealed against writes (seals %#x)", f.Name(), seals)
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < 0 || uint64(fi.Size()) < size {
		return fmt.Errorf("a fork's RAM (%s) holds %d bytes, the guest has %d", f.Name(), fi.Size(), size)
	}
	return nil
}

// checkRuns refuses runs that are not page-aligned, empty, out of order,
// overlapping, outside size bytes or more than MaxRuns.
func checkRuns(runs []Run, size uint64) error {
	if len(runs) > MaxRuns {
		return fmt.Errorf("a fork's RAM has %d runs, more than %d", len(runs), MaxRuns)
	}
	end := uint64(0)
	for i, r := range runs {
		if r.Off%PageSize != 0 || r.Len%PageSize != 0 || r.Len == 0 || r.Off < end || r.Off > size || r.Len > size-r.Off {
			return fmt.Errorf("a fork's RAM: run %d [%#x, +%#x) is not a page-aligned range after the last and inside %d bytes", i, r.Off, r.Len, size)
		}
		end = r.End()
	}
	return nil
}

// ForkFiles returns what a child in another process needs to map the
// frozen guest's RAM (NewFork): its base, the overlay (nil when nothing
// is mapped from one) and the runs. The files are new descriptors, the
// caller's to close.
func (g *Guest) ForkFiles() (base, overlay *os.File, runs []Run, err error) {
	if !g.frozen {
		return nil, nil, nil, fmt.Errorf("fork guest memory: freeze it first")
	}
	fd, err := unix.FcntlInt(uintptr(g.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	base = os.NewFile(uintptr(fd), "smol-guest-ram")
	if g.overlay != nil {
		if overlay, err = dupFile(g.overlay); err != nil {
			base.Close()
			return nil, nil, nil, err
		}
	}
	return base, overlay, append([]Run(nil), g.runs...), nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
