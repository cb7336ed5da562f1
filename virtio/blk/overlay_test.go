package blk

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// model is what a disk must read back: every operation is applied to it
// too.
type model struct {
	t    *testing.T
	d    *Disk
	want []byte
}

func (m *model) write(off int64, data []byte) {
	m.t.Helper()
	// Two buffers, split unevenly: vectored requests cross clusters.
	half := len(data) / 3
	if _, err := m.d.WriteAt([][]byte{data[:half], data[half:]}, off); err != nil {
		m.t.Fatal(err)
	}
	copy(m.want[off:], data)
}

func (m *model) zero(off, n int64, discard bool) {
	m.t.Helper()
	var err error
	if discard {
		err = m.d.Discard(off, n)
	} else {
		err = m.d.WriteZeroes(off, n, true)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	clear(m.want[off : off+n])
}

func (m *model) check(what string) {
	m.t.Helper()
	got := make([]byte, len(m.want))
	a, b := got[:len(got)/2+77], got[len(got)/2+77:]
	if _, err := m.d.ReadAt([][]byte{a, b}, 0); err != nil {
		m.t.Fatal(err)
	}
	if !bytes.Equal(got, m.want) {
		for i := range got {
			if got[i] != m.want[i] {
				m.t.Fatalf("%s: the disk differs from its model at byte %d", what, i)
			}
		}
	}
}

func randomImage(t *testing.T, path string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	rand.New(rand.NewSource(int64(size))).Read(b)
	clear(b[200<<10 : 400<<10]) // a hole, to be sparse
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOverlayReadsThroughAndCopiesUp: a layer reads as its base, takes
// writes (partial clusters copied up, whole ones not), zeroes and
// discards without the base showing through, survives a reopen, and never
// writes its base.
func TestOverlayReadsThroughAndCopiesUp(t *testing.T) {
	dir := t.TempDir()
	size := 1<<20 + 3*SectorSize // a last cluster that is partial
	base := randomImage(t, filepath.Join(dir, "base.img"), size)
	top := filepath.Join(dir, "disk"+OverlaySuffix)
	if err := CreateOverlay(top, "base.img", int64(size)); err != nil {
		t.Fatal(err)
	}
	d, err := Open(top, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Sectors() != uint64(size/SectorSize) {
		t.Fatalf("%d sectors", d.Sectors())
	}
	m := &model{t: t, d: d, want: append([]byte(nil), base...)}
	m.check("fresh")
	m.write(1000, []byte("hello, layer"))
	m.write(cowCluster-5, bytes.Repeat([]byte{7}, 3*cowCluster+10)) // partial, whole, whole, whole, partial
	m.write(int64(size)-700, bytes.Repeat([]byte{9}, 700))          // the partial last cluster
	m.zero(5*cowCluster+100, 2*cowCluster, false)
	m.zero(9*cowCluster, cowCluster+512, true)
	m.check("after writes")
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	m.write(12*cowCluster+3, []byte("after the flush"))
	d.Close() // Close writes the bitmap too
	if b, _ := os.ReadFile(filepath.Join(dir, "base.img")); !bytes.Equal(b, base) {
		t.Fatal("the base was written")
	}
	if d, err = Open(top, false); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m.d = d
	m.check("reopened")
	if _, err := Open(top, false); err == nil {
		t.Error("a layer opened twice for writing")
	}
	if r, err := Open(top, true); err == nil {
		r.Close()
		t.Error("a layer open for writing also opened for reading")
	}
	// The flat view reads the same, and its extents cover what is not a
	// hole.
	v, err := OpenView(top)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	flat := make([]byte, size)
	err = v.View().DataExtents(0, int64(size), func(s, e int64) error {
		_, err := v.View().ReadAt(flat[s:e], s)
		return err
	})
	if err != nil || !bytes.Equal(flat, m.want) {
		t.Fatalf("the view's data extents miss data: %v", err)
	}
}

// TestFreezeForks: freezing a running disk makes its contents a base that
// never changes again; siblings over it and the disk itself diverge; a
// second freeze stacks a layer, and the chain is listed for copies.
func TestFreezeForks(t *testing.T) {
	dir := t.TempDir()
	size := 2 << 20
	raw := filepath.Join(dir, "storage.ext4")
	randomImage(t, raw, size)
	d, err := Open(raw, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	want, _ := os.ReadFile(raw)
	m := &model{t: t, d: d, want: want}
	m.write(4096, []byte("before the fork"))
	path, base, err := d.Freeze("storage.base-1")
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "storage"+OverlaySuffix) || base != "storage.base-1.img" || d.Depth() != 1 {
		t.Fatalf("Freeze: %s, %s, depth %d", path, base, d.Depth())
	}
	if _, err := os.Stat(raw); err == nil {
		t.Error("the raw name still exists beside its layer")
	}
	atFork := append([]byte(nil), m.want...)
	child := filepath.Join(dir, "child"+OverlaySuffix)
	if err := CreateOverlay(child, base, int64(size)); err != nil {
		t.Fatal(err)
	}
	c, err := Open(child, false)
	if err != nil {
		t.Fatalf("a sibling over the frozen base: %v", err)
	}
	defer c.Close()
	cm := &model{t: t, d: c, want: append([]byte(nil), atFork...)}
	m.write(4096, []byte("the parent, after"))
	cm.write(4096, []byte("the child, after!"))
	m.check("parent")
	cm.check("child")
	if b, _ := os.ReadFile(filepath.Join(dir, base)); !bytes.Equal(b, atFork) {
		t.Fatal("the frozen base changed")
	}

	// A fork of the layer: a second level.
	path2, base2, err := d.Freeze("storage.base-2")
	if err != nil || path2 != path || base2 != "storage.base-2"+OverlaySuffix || d.Depth() != 2 {
		t.Fatalf("second Freeze: %s %s depth %d: %v", path2, base2, d.Depth(), err)
	}
	m.write(100<<10, []byte("level two"))
	m.check("parent at depth 2")
	chain, err := Chain(path2)
	if err != nil || strings.Join(chain, ",") != base2+","+base {
		t.Errorf("Chain: %v, %v", chain, err)
	}
	// Reopened from the files alone, the parent reads the same.
	d.Close()
	if d, err = Open(path2, false); err != nil {
		t.Fatal(err)
	}
	m.d = d
	m.check("parent reopened")
}

// TestHostileLayers: a layer file that lies is refused when opened, never
// followed outside its directory or around a loop.
func TestHostileLayers(t *testing.T) {
	dir := t.TempDir()
	randomImage(t, filepath.Join(dir, "base.img"), 1<<20)
	good := filepath.Join(dir, "good"+OverlaySuffix)
	if err := CreateOverlay(good, "base.img", 1<<20); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(good)
	for name, f := range map[string]func([]byte) []byte{
		"magic":       func(b []byte) []byte { b[0] = 'X'; return b },
		"version":     func(b []byte) []byte { b[8] = 9; return b },
		"size":        func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<21); return b },
		"huge size":   func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<62); return b },
		"escape":      func(b []byte) []byte { return setBase(b, "../base.img") },
		"absolute":    func(b []byte) []byte { return setBase(b, "/etc/passwd") },
		"loop":        func(b []byte) []byte { return setBase(b, "bad"+OverlaySuffix) },
		"no bitmap":   func(b []byte) []byte { return b[:len(b)-1] },
		"name length": func(b []byte) []byte { binary.LittleEndian.PutUint16(b[24:], 5000); return b },
	} {
		p := filepath.Join(dir, "bad"+OverlaySuffix)
		os.WriteFile(p, f(append([]byte(nil), orig...)), 0o600)
		if d, err := Open(p, false); err == nil {
			d.Close()
			t.Errorf("%s: a damaged layer opened", name)
		}
	}
	if err := CreateOverlay(filepath.Join(dir, "x.img"), "base.img", 1<<20); err == nil {
		t.Error("a layer without the suffix")
	}
}

func setBase(b []byte, name string) []byte {
	binary.LittleEndian.PutUint16(b[24:], uint16(len(name)))
	copy(b[cowHeaderHead:], name)
	return b
}
