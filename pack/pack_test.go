package pack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func testManifest() Manifest {
	return Manifest{Smol: "test", Created: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC), Platform: "linux/amd64",
		Machine: Machine{CPUs: 2, Memory: 512 << 20, Storage: 1 << 30, Env: []string{"A=1"}, Workdir: "/w"}}
}

// disk writes a sparse image: data at two places, a tail that is not a
// whole chunk, and (allocated) zeros that must not be packed.
func disk(t *testing.T, dir, name string, allocatedZeros bool) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteAt([]byte("superblock"), 1024)
	f.WriteAt([]byte("same chunk, another extent"), 40<<10) // a hole between it and the superblock
	f.WriteAt(bytes.Repeat([]byte{0x5a}, 100<<10), 30<<20)
	if allocatedZeros {
		f.WriteAt(make([]byte, 1<<20), 10<<20)
	}
	f.WriteAt([]byte("tail"), 64<<20+100)
	return p
}

func writePack(t *testing.T, dir, name string, allocatedZeros bool) string {
	t.Helper()
	out := filepath.Join(dir, name)
	w, err := Create(out, testManifest())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name string
		data []byte
	}{{Kernel, bytes.Repeat([]byte("vmlinux!"), 1000)}, {Agent, []byte("cpio")}} {
		if err := w.Add(s.name, bytes.NewReader(s.data), int64(len(s.data))); err != nil {
			t.Fatal(err)
		}
	}
	root := disk(t, t.TempDir(), "root.ext4", allocatedZeros)
	f, _ := os.Open(root)
	defer f.Close()
	fi, _ := f.Stat()
	if err := w.Add(Root, f, fi.Size()); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(Root, f, 1); err == nil {
		t.Error("a section added twice")
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTripSparseAndDeterministic(t *testing.T) {
	dir := t.TempDir()
	a := writePack(t, dir, "a.smolmachine", false)
	b := writePack(t, dir, "b.smolmachine", true) // same contents, other allocation
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two packs of the same inputs differ")
	}
	if len(ab) > 1<<20 {
		t.Errorf("a pack of ~100 KiB of data is %d bytes", len(ab))
	}
	r, err := Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Manifest.Machine.Workdir != "/w" || len(r.Manifest.Sections) != 3 {
		t.Errorf("manifest %+v", r.Manifest)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	out, _ := os.Create(filepath.Join(dir, "root.out"))
	defer out.Close()
	if err := r.Extract(Root, out); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(disk(t, t.TempDir(), "ref", false))
	got, _ := os.ReadFile(out.Name())
	if !bytes.Equal(got, want) {
		t.Fatal("the extracted root differs")
	}
	var st syscall.Stat_t
	syscall.Stat(out.Name(), &st)
	if st.Blocks*512 > 4<<20 {
		t.Errorf("the extracted image is not sparse: %d bytes allocated", st.Blocks*512)
	}
	if _, err := Create(a, testManifest()); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create over an existing pack: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // a, b, root.out
		t.Errorf("files left behind: %v", entries)
	}
}

// TestHostileFiles: damaged, truncated, altered and foreign files are
// refused with ErrFormat, before or while decompressing, never used.
func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	good, _ := os.ReadFile(writePack(t, dir, "good.smolmachine", false))
	manifestEnd := headerLen + int(binary.LittleEndian.Uint32(good[12:]))
	mutate := func(f func([]byte) []byte) string {
		b := f(append([]byte(nil), good...))
		p := filepath.Join(dir, "bad")
		os.WriteFile(p, b, 0o600)
		return p
	}
	openOrVerify := func(p string) error {
		r, err := Open(p)
		if err != nil {
			return err
		}
		defer r.Close()
		return r.Verify()
	}
	for name, f := range map[string]func([]byte) []byte{
		"empty":         func(b []byte) []byte { return nil },
		"garbage":       func(b []byte) []byte { return bytes.Repeat([]byte{7}, 4096) },
		"truncated":     func(b []byte) []byte { return b[:len(b)-100] },
		"major 2":       func(b []byte) []byte { b[8] = 2; return b },
		"huge manifest": func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<30); return b },
		"manifest byte": func(b []byte) []byte { b[headerLen+5] ^= 0xff; return b },
		"data byte":     func(b []byte) []byte { b[manifestEnd+40] ^= 0xff; return b },
		"last byte":     func(b []byte) []byte { b[len(b)-1] ^= 0x01; return b },
		"no root": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"name": "root"`), []byte(`"name": "live"`), 1)
		},
		"unknown section": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"name": "agent"`), []byte(`"name": "other"`), 1)
		},
	} {
		if err := openOrVerify(mutate(f)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
}
