package memory

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/smolvm/smol/internal/sparsefile"
	"golang.org/x/sys/unix"
)

// A private guest mapping (a fork's, a restore's, a frozen guest that ran
// on) has two sources for its current contents:
// the file it is a private mapping of (a fork point's sealed memfd and
// overlay, or a snapshot's RAM region) and
// the pages it wrote since, which the kernel copied into anonymous memory
// (plus the ranges the balloon replaced with fresh anonymous zero pages),
// found in /proc/self/pagemap (forChangedPages). A guest over a sealed
// base only needs the second to freeze (overlay.go). A restored guest,
// whose snapshot file could change under it, is copied into a memfd of
// its own: reading the whole mapping would fault in every page, so
// copyChanged builds it from the two sources instead, the file's data
// read with SEEK_DATA (its holes neither read nor allocated), then the
// changed pages.

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagemapPresent  = 1 << 63
	pagemapSwapped  = 1 << 62
	pagemapFileOrSh = 1 << 61 // a file page or shared anonymous: not one this process copied
)

// copyChanged fills fd, an empty memfd of g's size, with g's current
// contents; g is a private mapping of g.fd's file from g.fdOff.
func (g *Guest) copyChanged(fd int) error {
	// An *os.File, so that the copy can skip the base's holes (SEEK_DATA).
	dup, err := unix.FcntlInt(uintptr(g.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(dup), "guest memory base")
	defer src.Close()
	if err := sparsefile.Copy(fdWriter(fd), src, g.fdOff, 0, int64(len(g.mapping))); err != nil {
		return fmt.Errorf("copy the fork point: %w", err)
	}
	base := uintptr(unsafe.Pointer(&g.mapping[0]))
	anon, _, err := anonymousRanges(base, uintptr(len(g.mapping)))
	if err != nil {
		return err
	}
	for _, r := range anon { // discarded by the balloon: zero now
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(r[0]-base), int64(r[1]-r[0])); err != nil {
			return fmt.Errorf("zero a discarded range: %w", err)
		}
	}
	return g.forChangedPages(func(off, n int) error {
		return writeFull(fd, g.mapping[off:off+n], int64(off))
	})
}

// forChangedPages calls fn for each run of pages of the mapping that this
// process holds a private copy of (written since the freeze, or swapped).
func (g *Guest) forChangedPages(fn func(off, n int) error) error {
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return err
	}
	defer pm.Close()
	base := uintptr(unsafe.Pointer(&g.mapping[0]))
	pages := len(g.mapping) / PageSize
	buf := make([]byte, 8*4096)
	run, runStart := 0, 0
	for first := 0; first < pages; first += len(buf) / 8 {
		n := min(len(buf)/8, pages-first)
		if _, err := pm.ReadAt(buf[:8*n], int64((base/PageSize+uintptr(first))*8)); err != nil {
			return fmt.Errorf("pagemap: %w", err)
		}
		for i := 0; i < n; i++ {
			e := binary.LittleEndian.Uint64(buf[8*i:])
			changed := e&(pagemapPresent|pagemapSwapped) != 0 && e&pagemapFileOrSh == 0
			if changed {
				if run == 0 {
					runStart = first + i
				}
				run++
				continue
			}
			if run > 0 {
				if err := fn(runStart*PageSize, run*PageSize); err != nil {
					return err
				}
				run = 0
			}
		}
	}
	if run > 0 {
		return fn(runStart*PageSize, run*PageSize)
	}
	return nil
}

// anonymousRanges lists the parts of [base, base+size) that this
// process's memory map shows as anonymous (no file behind them), and
// counts the process's mappings.
func anonymousRanges(base, size uintptr) (_ [][2]uintptr, mappings int, _ error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var out [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		mappings++
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || fields[4] != "0" {
			continue
		}
		s, e := max(uintptr(start), base), min(uintptr(end), base+size)
		if s < e {
			out = append(out, [2]uintptr{s, e})
		}
	}
	return out, mappings, sc.Err()
}

type fdWriter int

func (w fdWriter) WriteAt(p []byte, off int64) (int, error) {
	if err := writeFull(int(w), p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}
