package memory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Folding a guest's changes into a new overlay (Freeze of a guest over a
// sealed base). Each page of the guest comes from one of four sources,
// and is read from there, never through the guest's mapping where that
// could allocate: a read fault on a hole of a private file mapping
// allocates the page in the file, and the base and earlier overlays are
// shared by children that live on.
const (
	srcBase byte = iota // unchanged since the base: the base's page
	srcOld              // an earlier overlay's page, mapped and not written since
	srcOwn              // a page this process holds: written since, or swapped
	srcZero             // discarded since and not written, or reads as zeros
)

// runLimit is MaxRuns, lowered by tests.
var runLimit = MaxRuns

// remapRuns is mapRuns, replaced by tests to fail.
var remapRuns = mapRuns

// foldIntoOverlay freezes a private guest whose base is a sealed memfd:
// everything that differs from the base (the overlay's runs it already
// maps, the pages it wrote, the ranges the balloon discarded) goes into a
// new sealed overlay, and the guest is remapped from it, which frees its
// private copies. Pages that read as zeros are mapped anonymous (or, where
// runs were merged, left as holes in the overlay).
func (g *Guest) foldIntoOverlay() error {
	if g.broken != nil {
		return g.broken
	}
	src, mappings, err := g.pageSources()
	if err != nil {
		return err
	}
	runs := coalesceRuns(runsOf(src), runLimit, cheapGap)
	if err := checkMappingBudget(mappings, len(runs)); err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("smol-guest-ram-overlay", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	overlay := os.NewFile(uintptr(fd), "smol-guest-ram-overlay")
	if err := g.fillOverlay(fd, runs, src); err != nil {
		overlay.Close()
		return err
	}
	if err := remapRuns(g.mapping, fd, runs); err != nil {
		// Part of the mapping may map the new overlay, and a kernel
		// before 6.12 may have unmapped a range whose remap failed: what
		// the guest holds is no longer known, so it is never forked or
		// frozen again (a guest touching an unmapped range stops).
		g.broken = fmt.Errorf("guest memory is in an unknown state after a failed remap, and cannot be forked: %w", err)
		overlay.Close()
		return g.broken
	}
	if g.overlay != nil {
		g.overlay.Close() // its children map it; this guest no longer does
	}
	g.overlay, g.runs = overlay, runs
	return nil
}

// pageSources maps every page of the guest to its source, and counts the
// process's mappings (for checkMappingBudget).
func (g *Guest) pageSources() (src []byte, mappings int, err error) {
	src = make([]byte, len(g.mapping)/PageSize)
	for _, r := range g.runs {
		if !r.Zero {
			markPages(src, r.Off, r.Len, srcOld)
		}
	}
	base := uintptr(unsafe.Pointer(&g.mapping[0]))
	anon, mappings, err := anonymousRanges(base, uintptr(len(g.mapping)))
	if err != nil {
		return nil, 0, err
	}
	for _, r := range anon {
		markPages(src, uint64(r[0]-base), uint64(r[1]-r[0]), srcZero)
	}
	if err := g.forChangedPages(func(off, n int) error {
		markPages(src, uint64(off), uint64(n), srcOwn)
		return nil
	}); err != nil {
		return nil, 0, err
	}
	// A page that reads as zeros (discarded, an old overlay's hole, or
	// only read since: the shared zero page) is mapped anonymous rather
	// than from the new overlay, whose holes would be allocated on a fault.
	var buf []byte
	err = g.forSourceSpans(src, 0, uint64(len(g.mapping)), [4]bool{srcOld: true, srcOwn: true}, &buf, func(s byte, off uint64, data []byte) error {
		if data == nil {
			return nil
		}
		for p := uint64(0); p < uint64(len(data)); p += PageSize {
			if isZero(data[p : p+PageSize]) {
				src[(off+p)/PageSize] = srcZero
			}
		}
		return nil
	})
	return src, mappings, err
}

// fillOverlay sizes the new memfd fd as the guest, writes the data runs'
// non-zero pages into it, each read from its source, and seals it.
func (g *Guest) fillOverlay(fd int, runs []Run, src []byte) error {
	if err := unix.Ftruncate(fd, int64(len(g.mapping))); err != nil {
		return err
	}
	var buf []byte
	for _, r := range runs {
		if r.Zero {
			continue
		}
		err := g.forSourceSpans(src, r.Off, r.End(), [4]bool{srcBase: true, srcOld: true, srcOwn: true}, &buf, func(s byte, off uint64, data []byte) error {
			if data == nil {
				return nil
			}
			// Consecutive non-zero pages go in one write.
			start := uint64(0)
			for p := uint64(0); p <= uint64(len(data)); p += PageSize {
				if p < uint64(len(data)) && !isZero(data[p:p+PageSize]) {
					continue
				}
				if p > start {
					if err := writeFull(fd, data[start:p], int64(off+start)); err != nil {
						return fmt.Errorf("write the overlay: %w", err)
					}
				}
				start = p + PageSize
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, forkSeals); err != nil {
		return fmt.Errorf("seal the overlay: %w", err)
	}
	return nil
}

// spanChunk bounds one read of a source: the buffer's size.
const spanChunk = 1 << 20

// forSourceSpans calls fn for each span of [from, to) whose pages share a
// source, at most spanChunk bytes at a time, with their contents when
// read[source] is set (else nil; *buf is the files' buffer, allocated on
// first use): a process's own pages from the mapping
// (resident: reading them allocates nothing), an earlier overlay's and
// the base's read from their files (a hole of a memfd reads as zeros
// without being allocated); zero pages' contents are nil.
func (g *Guest) forSourceSpans(src []byte, from, to uint64, read [4]bool, buf *[]byte, fn func(s byte, off uint64, data []byte) error) error {
	for off := from; off < to; {
		s := src[off/PageSize]
		end := off + PageSize
		for end < to && end-off < spanChunk && src[end/PageSize] == s {
			end += PageSize
		}
		var data []byte
		if read[s] {
			if *buf == nil {
				*buf = make([]byte, spanChunk)
			}
			var err error
			switch s {
			case srcOwn:
				data = g.mapping[off:end]
			case srcOld:
				if g.overlay == nil {
					return errors.New("guest memory: runs without an overlay")
				}
				data = (*buf)[:end-off]
				err = readFull(int(g.overlay.Fd()), data, int64(off))
			case srcBase:
				data = (*buf)[:end-off]
				err = readFull(g.fd, data, g.fdOff+int64(off))
			}
			if err != nil {
				return fmt.Errorf("read guest memory at %#x: %w", off, err)
			}
		}
		if err := fn(s, off, data); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// readFull fills p from fd at off.
func readFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pread(fd, p, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// writeFull writes all of p to fd at off: a write may be short (Linux
// caps one at 2 GiB less a page), and a page left out would read as zeros.
func writeFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p[:min(len(p), spanChunk)], off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

var zeroPage [PageSize]byte

func isZero(page []byte) bool { return bytes.Equal(page, zeroPage[:]) }

// mappingReserve is kept free of the process's mapping budget for
// everything else the VMM maps.
const mappingReserve = 4096

// checkMappingBudget refuses a fold whose runs would take the process
// past vm.max_map_count: an mmap failing half way through the remap would
// leave the guest's memory in an unknown state. Each run may split one
// mapping into three.
func checkMappingBudget(mappings, runs int) error {
	limit := 65530 // the kernel's default
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			limit = n
		}
	}
	if need := mappings + 2*runs + mappingReserve; need > limit {
		return fmt.Errorf("fork: guest memory would need %d more mappings in a process that has %d of at most %d (vm.max_map_count)", 2*runs, mappings, limit)
	}
	return nil
}

func markPages(src []byte, off, n uint64, s byte) {
	for p := off / PageSize; p < (off+n)/PageSize; p++ {
		src[p] = s
	}
}

// runsOf turns a page source map into runs: data where pages come from
// an earlier overlay or the process, zero where they read as zeros.
func runsOf(src []byte) []Run {
	class := func(s byte) byte { // base 0, data 1, zero 2
		switch s {
		case srcBase:
			return 0
		case srcZero:
			return 2
		}
		return 1
	}
	var runs []Run
	for p := 0; p < len(src); {
		c := class(src[p])
		q := p + 1
		for q < len(src) && class(src[q]) == c {
			q++
		}
		if c != 0 {
			runs = append(runs, Run{Off: uint64(p) * PageSize, Len: uint64(q-p) * PageSize, Zero: c == 2})
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

// coalesceRuns merges data runs no more than gap apart, then, while more
// than limit remain, the runs with the smallest gaps between them. A
// merged run is data (its zero pages become holes in the overlay, its
// base pages copies), unless it joins two zero runs that touch. (A zero
// run is not merged for cheapness: a large one left to the overlay's
// holes would allocate pages in the overlay where the guest touches it.)
func coalesceRuns(runs []Run, limit int, gap uint64) []Run {
	runs = mergeRuns(runs, gap, false)
	if len(runs) <= limit {
		return runs
	}
	// Merging every gap up to the (len-limit)th smallest leaves at most
	// limit runs (more merge where gaps tie).
	gaps := make([]uint64, len(runs)-1)
	for i := range gaps {
		gaps[i] = runs[i+1].Off - runs[i].End()
	}
	slices.Sort(gaps)
	return mergeRuns(runs, gaps[len(runs)-limit-1], true)
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
