package memory

import (
	"bytes"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestForkLineagesKeepTheirContents drives guests through random writes,
// balloon discards and forks of forks, each guest (parent or child)
// running on after forking, and checks every page of every live guest
// against a model after each step: whatever the order, a child reads its
// parent's RAM at the fork and never a later write of anyone's.
func TestForkLineagesKeepTheirContents(t *testing.T) {
	for _, limit := range []int{MaxRuns, 3} { // 3: every fold merges runs
		t.Run(strconv.Itoa(limit), func(t *testing.T) {
			defer func(old int) { runLimit = old }(runLimit)
			runLimit = limit
			forkLineages(t)
		})
	}
}

func forkLineages(t *testing.T) {
	const pages = 512
	type live struct {
		g     *Guest
		model []byte // each page is filled with this byte
	}
	first, err := New(pages * PageSize)
	if err != nil {
		t.Fatal(err)
	}
	// Every page of the first fork point holds data, so that a child
	// reading the base where it should read zeros or an overlay shows.
	model := make([]byte, pages)
	for p := range model {
		model[p] = byte(p%250) + 1
		copy(first.Bytes()[p*PageSize:(p+1)*PageSize], bytes.Repeat([]byte{model[p]}, PageSize))
	}
	guests := []*live{{g: first, model: model}}
	defer func() {
		for _, l := range guests {
			l.g.Close()
		}
	}()
	rng := rand.New(rand.NewSource(1))
	check := func(step int, what string) {
		t.Helper()
		for i, l := range guests {
			mem := l.g.Bytes()
			for p := 0; p < pages; p++ {
				want := l.model[p]
				page := mem[p*PageSize : (p+1)*PageSize]
				if page[0] != want || page[PageSize-1] != want || !bytes.Equal(page, bytes.Repeat([]byte{want}, PageSize)) {
					t.Fatalf("step %d (%s): guest %d page %d reads %#x, want %#x", step, what, i, p, page[0], want)
				}
			}
		}
	}
	for step := 0; step < 400; step++ {
		l := guests[rng.Intn(len(guests))]
		var what string
		switch op := rng.Intn(10); {
		case op < 6: // write a few pages
			p, n, b := rng.Intn(pages), 1+rng.Intn(8), byte(rng.Intn(256)) // zeros too
			for q := p; q < min(p+n, pages); q++ {
				copy(l.g.Bytes()[q*PageSize:(q+1)*PageSize], bytes.Repeat([]byte{b}, PageSize))
				l.model[q] = b
			}
			what = "write"
		case op < 8: // the balloon discards a range
			p, n := rng.Intn(pages), 1+rng.Intn(16)
			n = min(n, pages-p)
			if err := l.g.Discard(uint64(p)*PageSize, uint64(n)*PageSize); err != nil {
				t.Fatal(err)
			}
			for q := p; q < p+n; q++ {
				l.model[q] = 0
			}
			what = "discard"
		default: // fork it; the parent runs on
			if err := l.g.Freeze(); err != nil {
				t.Fatalf("step %d: freeze: %v", step, err)
			}
			child, err := l.g.Fork()
			if err != nil {
				t.Fatalf("step %d: fork: %v", step, err)
			}
			l.g.Thaw()
			guests = append(guests, &live{g: child, model: append([]byte(nil), l.model...)})
			what = "fork"
			if len(guests) > 6 { // an ancestor ends; its descendants live on
				k := rng.Intn(len(guests) - 1)
				guests[k].g.Close()
				guests = append(guests[:k], guests[k+1:]...)
			}
		}
		check(step, what)
	}
}

// TestScatteredChangesStayWithinMaxRuns: a guest that changed every
// other page since its base is still forked with at most MaxRuns
// mappings (the runs merged, the base pages between them copied), and
// the child reads exactly the parent's memory.
func TestScatteredChangesStayWithinMaxRuns(t *testing.T) {
	const size = 64 << 20
	g := newGuest(t, size)
	mem, want := g.Bytes(), make([]byte, size)
	for p := 0; p < size/PageSize; p += 3 {
		mem[p*PageSize], want[p*PageSize] = 1, 1
	}
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	g.Thaw()
	mem = g.Bytes()
	for p := 0; p < 3*MaxRuns; p += 2 {
		mem[p*PageSize+1], want[p*PageSize+1] = 2, 2
	}
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	if len(g.runs) > MaxRuns {
		t.Fatalf("%d runs, more than %d", len(g.runs), MaxRuns)
	}
	child, err := g.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	// Against what was written, not the parent: both map the overlay.
	if !bytes.Equal(child.Bytes(), want) || !bytes.Equal(g.Bytes(), want) {
		t.Fatal("the fork's memory differs from what was written")
	}
	if n := countMappings(t, child); n > 2*MaxRuns+1 {
		t.Errorf("the child's RAM is %d mappings", n)
	}
}

// countMappings counts the entries of /proc/self/maps inside g's RAM.
func countMappings(t *testing.T, g *Guest) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	lo := uint64(uintptr(unsafe.Pointer(&g.mapping[0])))
	hi := lo + uint64(len(g.mapping))
	n := 0
	for _, line := range strings.Split(string(maps), "\n") {
		from, rest, _ := strings.Cut(line, "-")
		to, _, _ := strings.Cut(rest, " ")
		start, err1 := strconv.ParseUint(from, 16, 64)
		end, err2 := strconv.ParseUint(to, 16, 64)
		if err1 == nil && err2 == nil && start >= lo && end <= hi {
			n++
		}
	}
	return n
}

func TestCoalesceRuns(t *testing.T) {
	const P = PageSize
	for _, c := range []struct {
		in    []Run
		limit int
		want  []Run
	}{
		{[]Run{{0, P, false}, {2 * P, P, true}, {8 * P, P, false}}, 3, []Run{{0, P, false}, {2 * P, P, true}, {8 * P, P, false}}},
		// Touching runs of two kinds merge first, into data.
		{[]Run{{0, P, true}, {P, P, false}, {8 * P, P, false}}, 2, []Run{{0, 2 * P, false}, {8 * P, P, false}}},
		// Two zero runs with a base page between become data.
		{[]Run{{0, P, true}, {2 * P, P, true}}, 1, []Run{{0, 3 * P, false}}},
		// The closest merge first.
		{[]Run{{0, P, false}, {2 * P, P, false}, {10 * P, P, false}, {40 * P, P, false}}, 3, []Run{{0, 3 * P, false}, {10 * P, P, false}, {40 * P, P, false}}},
		// Data runs a cheap gap apart merge whatever the limit; a zero
		// run as close does not.
		{[]Run{{0, P, false}, {5 * P, P, false}, {7 * P, P, true}, {20 * P, P, false}}, 10, []Run{{0, 6 * P, false}, {7 * P, P, true}, {20 * P, P, false}}},
	} {
		if got := coalesceRuns(append([]Run(nil), c.in...), c.limit, cheapGap); !reflect.DeepEqual(got, c.want) {
			t.Errorf("coalesceRuns(%v, %d) = %v, want %v", c.in, c.limit, got, c.want)
		}
	}
}

// TestNewForkRefuses: a child's RAM comes from files its starter handed
// over; anything but sealed memfds of the right size, and runs that are
// page-aligned, in order and inside the RAM, is refused before mapping.
func TestNewForkRefuses(t *testing.T) {
	const size = 1 << 20
	memfd := func(n int64, seal bool) *os.File {
		fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, n); err != nil {
			t.Fatal(err)
		}
		if seal {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, forkSeals); err != nil {
				t.Fatal(err)
			}
		}
		f := os.NewFile(uintptr(fd), "t")
		t.Cleanup(func() { f.Close() })
		return f
	}
	sealed, unsealed, short := memfd(size, true), memfd(size, false), memfd(size/2, true)
	plain, err := os.CreateTemp(t.TempDir(), "ram")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.Truncate(size)
	data := []Run{{0, PageSize, false}}
	for _, c := range []struct {
		name          string
		base, overlay *os.File
		runs          []Run
		want          string
	}{
		{"unsealed base", unsealed, nil, nil, "not sealed"},
		{"a plain file", plain, nil, nil, "not a sealed memfd"},
		{"short base", short, nil, nil, "holds 524288 bytes"},
		{"unsealed overlay", sealed, unsealed, data, "not sealed"},
		{"data runs without an overlay", sealed, nil, data, "no overlay"},
		{"unaligned run", sealed, sealed, []Run{{1, PageSize, false}}, "page-aligned"},
		{"empty run", sealed, sealed, []Run{{0, 0, true}}, "page-aligned"},
		{"overlapping runs", sealed, sealed, []Run{{0, 2 * PageSize, false}, {PageSize, PageSize, true}}, "after the last"},
		{"run past the end", sealed, sealed, []Run{{size - PageSize, 2 * PageSize, false}}, "inside"},
		{"run at a huge offset", sealed, sealed, []Run{{^uint64(0) &^ (PageSize - 1), PageSize, false}}, "inside"},
		{"too many runs", sealed, sealed, make([]Run, MaxRuns+1), "more than"},
	} {
		g, err := NewFork(c.base, c.overlay, c.runs, size)
		if err == nil {
			g.Close()
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	g, err := NewFork(sealed, sealed, []Run{{0, PageSize, false}, {PageSize, PageSize, true}}, size)
	if err != nil {
		t.Fatalf("good hand-over refused: %v", err)
	}
	g.Close()
}

// BenchmarkLaterFreeze: the host's side of a later fork of a 1 GiB guest
// that holds 256 MiB and changed 4 MiB (1024 scattered pages) since its
// first fork: Freeze (the fold into an overlay) and one child's mapping.
func BenchmarkLaterFreeze(b *testing.B) {
	const size = 1 << 30
	g, err := New(size)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	mem := g.Bytes()
	for i := size / 2; i < size/2+size/4; i += PageSize {
		mem[i] = 1
	}
	if err := g.Freeze(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		g.Thaw()
		mem = g.Bytes()
		for i := size / 2; i < size/2+size/4; i += size / 4 / 1024 {
			mem[i] = byte(round) + 2
		}
		if err := g.Freeze(); err != nil {
			b.Fatal(err)
		}
		child, err := g.Fork()
		if err != nil {
			b.Fatal(err)
		}
		child.Close()
	}
}

// TestMergedFoldsAllocateNoSharedHoles: runs merged to stay under the
// limit take in base pages the guest never touched, and the next fold
// reads the first overlay's holes; neither may allocate pages in the
// base or the earlier overlay, which children keep alive, and the
// overlay holds the data, not the gaps.
func TestMergedFoldsAllocateNoSharedHoles(t *testing.T) {
	defer func(old int) { runLimit = old }(runLimit)
	runLimit = 2
	const size = 64 << 20
	g := newGuest(t, size)
	want := make([]byte, size)
	write := func(p int, b byte) {
		g.Bytes()[p*PageSize], want[p*PageSize] = b, b
	}
	write(0, 1) // the base holds one page
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	g.Thaw()
	for p := 100; p < 4100; p += 8 { // 500 runs over 16 MiB of the base's holes
		write(p, 2)
	}
	baseBlocks := blocks(t, g.fd)
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	if len(g.runs) > runLimit {
		t.Fatalf("%d runs over a limit of %d", len(g.runs), runLimit)
	}
	if b := blocks(t, g.fd); b != baseBlocks {
		t.Errorf("the fold allocated %d blocks of the base", b-baseBlocks)
	}
	first := g.overlay
	if b := blocks(t, int(first.Fd())); b*512 > 600*PageSize {
		t.Errorf("the overlay holds %d bytes for 500 pages of data", b*512)
	}
	firstChild, err := g.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer firstChild.Close()
	first = firstChild.overlay // the guest closes its own on the next fold
	g.Thaw()
	write(5000, 3)
	firstBlocks, baseBlocks := blocks(t, int(first.Fd())), blocks(t, g.fd)
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	if b := blocks(t, int(first.Fd())); b != firstBlocks {
		t.Errorf("the second fold allocated %d blocks of the first overlay", b-firstBlocks)
	}
	if b := blocks(t, g.fd); b != baseBlocks {
		t.Errorf("the second fold allocated %d blocks of the base", b-baseBlocks)
	}
	child, err := g.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	if !bytes.Equal(child.Bytes(), want) {
		t.Error("the child's memory differs from what was written")
	}
}

// TestFailedRemapStopsForks: a fold whose remap fails part way leaves the
// guest's memory in a state nobody knows, so that guest is never frozen
// or forked again (instead of handing children the wrong pages).
func TestFailedRemapStopsForks(t *testing.T) {
	defer func(old func([]byte, int, []Run) error) { remapRuns = old }(remapRuns)
	g := newGuest(t, 4<<20)
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	g.Thaw()
	g.Bytes()[10*PageSize], g.Bytes()[500*PageSize] = 1, 1
	remapRuns = func(m []byte, fd int, runs []Run) error {
		if err := mapRuns(m, fd, runs[:1]); err != nil {
			return err
		}
		return unix.ENOMEM
	}
	if err := g.Freeze(); err == nil {
		t.Fatal("the failed remap was not reported")
	}
	remapRuns = mapRuns
	if err := g.Freeze(); err == nil || !strings.Contains(err.Error(), "unknown state") {
		t.Fatalf("a later freeze: %v", err)
	}
	if c, err := g.Fork(); err == nil {
		c.Close()
		t.Fatal("a guest whose remap failed forked")
	}
}

// TestWritesToUntouchedRAMCostOnePage: after a fork, a page neither the
// parent nor anyone had touched costs whoever writes it one anonymous
// page, and nothing in the base they share (a write fault on a hole of a
// private mapping of a memfd would allocate the hole in the memfd first).
func TestWritesToUntouchedRAMCostOnePage(t *testing.T) {
	const size = 64 << 20
	g := newGuest(t, size)
	copy(g.Bytes()[PageSize:], "data")
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	child, err := g.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	baseBlocks := blocks(t, g.fd)
	g.Thaw()
	for _, m := range []*Guest{g, child} {
		for off := 8 << 20; off < 40<<20; off += 1 << 20 {
			m.Bytes()[off] = 7
		}
	}
	if b := blocks(t, g.fd); b != baseBlocks {
		t.Errorf("writes to untouched RAM allocated %d KiB of the shared base", (b-baseBlocks)/2)
	}
	if got := string(child.Bytes()[PageSize : PageSize+4]); got != "data" {
		t.Errorf("the child reads %q", got)
	}
	if n := changedPages(t, child); n != 32 {
		t.Errorf("the child holds %d pages of its own for 32 written", n)
	}
}
