package memory

import (
	"bytes"
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

// Page kinds in foldIntoOverlay's map of the guest.
const (
	pageBase byte = iota // reads the base: unchanged
	pageData             // changed: its contents go into the overlay
	pageZero             // discarded since: zeros
)

// foldIntoOverlay freezes a private guest whose base is a sealed memfd:
// everything that differs from the base (the overlay's runs it already
// maps, the pages it wrote, the ranges the balloon discarded) goes into a
// new sealed overlay, and the guest is remapped from it, which frees its
// private copies. Pages that read as zeros are mapped anonymous (or, where
// runs were merged, left as holes in the overlay).
func (g *Guest) foldIntoOverlay() error {
	kind := make([]byte, len(g.mapping)/PageSize)
	for _, r := range g.runs {
		if !r.Zero {
			markPages(kind, r.Off, r.Len, pageData)
		}
	}
	base := uintptr(unsafe.Pointer(&g.mapping[0]))
	anon, err := anonymousRanges(base, uintptr(len(g.mapping)))
	if err != nil {
		return err
	}
	for _, r := range anon {
		markPages(kind, uint64(r[0]-base), uint64(r[1]-r[0]), pageZero)
	}
	if err := g.forChangedPages(func(off, n int) error {
		markPages(kind, uint64(off), uint64(n), pageData)
		return nil
	}); err != nil {
		return err
	}
	// A changed page that reads as zeros (discarded, or only read since:
	// the shared zero page) is mapped anonymous rather than from the
	// overlay, whose holes would be allocated on a fault.
	var zero [PageSize]byte
	for p, k := range kind {
		if k == pageData && bytes.Equal(g.mapping[p*PageSize:(p+1)*PageSize], zero[:]) {
			kind[p] = pageZero
		}
	}
	runs := coalesceRuns(runsOf(kind), MaxRuns, cheapGap)

	fd, err := unix.MemfdCreate("smol-guest-ram-overlay", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	overlay := os.NewFile(uintptr(fd), "smol-guest-ram-overlay")
	if err := g.fillOverlay(fd, runs); err != nil {
		overlay.Close()
		return err
	}
	if err := mapRuns(g.mapping, fd, runs); err != nil {
		// The guest's mapping may be partly remapped: its contents are
		// the same either way (the overlay holds what it replaced).
		overlay.Close()
		return err
	}
	if g.overlay != nil {
		g.overlay.Close() // its children map it; this guest no longer does
	}
	g.overlay, g.runs = overlay, runs
	return nil
}

// fillOverlay sizes the new memfd fd as the guest, writes the runs'
// non-zero pages into it from the guest's mapping, and seals it.
func (g *Guest) fillOverlay(fd int, runs []Run) error {
	if err := unix.Ftruncate(fd, int64(len(g.mapping))); err != nil {
		return err
	}
	var zero [PageSize]byte
	for _, r := range runs {
		if r.Zero {
			continue
		}
		// Consecutive non-zero pages go in one write.
		start := r.Off
		for off := r.Off; off <= r.End(); off += PageSize {
			if off < r.End() && !bytes.Equal(g.mapping[off:off+PageSize], zero[:]) {
				continue
			}
			if off > start {
				if _, err := unix.Pwrite(fd, g.mapping[start:off], int64(start)); err != nil {
					return fmt.Errorf("write the overlay: %w", err)
				}
			}
			start = off + PageSize
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, forkSeals); err != nil {
		return fmt.Errorf("seal the overlay: %w", err)
	}
	return nil
}

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

func markPages(kind []byte, off, n uint64, k byte) {
	for p := off / PageSize; p < (off+n)/PageSize; p++ {
		kind[p] = k
	}
}

// runsOf turns a page map into the runs of pages that are not the base's.
func runsOf(kind []byte) []Run {
	var runs []Run
	for p := 0; p < len(kind); {
		k := kind[p]
		q := p + 1
		for q < len(kind) && kind[q] == k {
			q++
		}
		if k != pageBase {
			runs = append(runs, Run{Off: uint64(p) * PageSize, Len: uint64(q-p) * PageSize, Zero: k == pageZero})
		}
		p = q
	}
	return runs
}

// cheapGap is the gap between two runs that is cheaper to copy into the
// overlay than to leave to the base: a mapping costs the guest and every
// child an mmap (and the guest's VM an invalidation of the range), several
// microseconds, as much as copying a few pages.
const cheapGap = 4 * PageSize

// coalesceRuns merges data runs no more than gap apart, then any runs,
// the closest first, until at most limit remain. A merged run is data
// (its zero pages become holes in the overlay, its base pages copies),
// unless it joins two zero runs that touch. (A zero run is not merged for
// cheapness: a large one left to the overlay's holes would allocate
// pages in the overlay where the guest touches it.)
func coalesceRuns(runs []Run, limit int, gap uint64) []Run {
	runs = mergeRuns(runs, gap, false)
	for gap := uint64(0); len(runs) > limit; gap = max(2*gap, PageSize) {
		runs = mergeRuns(runs, gap, true)
	}
	return runs
}

// mergeRuns merges neighbouring runs no more than gap apart, zero runs
// only if withZero.
func mergeRuns(runs []Run, gap uint64, withZero bool) []Run {
	if len(runs) == 0 {
		return runs
	}
	out := []Run{runs[0]}
	for _, r := range runs[1:] {
		last := &out[len(out)-1]
		if r.Off-last.End() > gap || !withZero && (r.Zero || last.Zero) {
			out = append(out, r)
			continue
		}
		last.Zero = last.Zero && r.Zero && r.Off == last.End()
		last.Len = r.End() - last.Off
	}
	return out
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
