package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

type vcpuState struct {
	RIP  uint64
	MSRs map[uint32]uint64
}

// ramImage is guest RAM with a few non-zero pages among zero ones.
func ramImage() []byte {
	ram := make([]byte, 64*PageSize)
	copy(ram[0:], "first page")
	copy(ram[17*PageSize+5:], "middle")
	ram[len(ram)-1] = 0xff
	return ram
}

// sample writes a snapshot with two sections and ramImage.
func sample(dir string) (string, error) {
	p := filepath.Join(dir, "m.snap")
	w, err := NewWriter(p)
	if err != nil {
		return "", err
	}
	if err := w.Section("vcpu.0", 1, vcpuState{RIP: 0xffffffff81000000, MSRs: map[uint32]uint64{0xc0000080: 0xd01}}); err != nil {
		return "", err
	}
	if err := w.Section("device.blk.0", 2, map[string]int{"next_avail": 7}); err != nil {
		return "", err
	}
	if err := w.Section("vcpu.0", 1, 1); err == nil {
		return "", errors.New("a section name given twice was accepted")
	}
	ram := ramImage()
	return p, w.Commit(bytes.NewReader(ram), int64(len(ram)))
}

func write(t *testing.T, dir string) string {
	t.Helper()
	p, err := sample(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoundTripAndSparseRAM(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir)
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var v vcpuState
	if err := r.Section("vcpu.0", 1, &v); err != nil || v.RIP != 0xffffffff81000000 || v.MSRs[0xc0000080] != 0xd01 {
		t.Fatalf("vcpu.0: %+v %v", v, err)
	}
	if err := r.Section("device.blk.0", 1, &map[string]int{}); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("a section read at the wrong version: %v", err)
	}
	if err := r.Section("absent", 1, &v); !errors.Is(err, ErrFormat) {
		t.Errorf("absent section: %v", err)
	}
	f, off, length := r.RAM()
	if off%PageSize != 0 || length != 64*PageSize {
		t.Fatalf("RAM at %d, %d bytes", off, length)
	}
	got := make([]byte, length)
	if _, err := f.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, ramImage()) {
		t.Fatal("RAM differs after the round trip")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated >= length {
		t.Errorf("RAM is not sparse: %d bytes allocated for %d of RAM", allocated, length)
	}
	// Never over an existing file, and nothing left behind.
	if _, err := NewWriter(p); !errors.Is(err, os.ErrExist) {
		t.Errorf("NewWriter over an existing snapshot: %v", err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Errorf("directory holds %d entries, want the snapshot alone", len(des))
	}
}

// TestHostileFiles: every damaged file is refused with ErrFormat, before
// any section is decoded.
func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(write(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	tableEnd := headerLen + 3*entryLen
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":          {},
		"garbage":        bytes.Repeat([]byte{0x5a}, 4096),
		"truncated head": good[:headerLen-1],
		"truncated":      good[:tableEnd+10],
		"major 2":        mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[8:], 2); return b }),
		"zero sections":  mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 0); return b }),
		"huge count":     mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<31); return b }),
		"table flipped":  mutate(func(b []byte) []byte { b[headerLen+nameLen+8] ^= 1; return b }),
		"section flipped": mutate(func(b []byte) []byte {
			b[tableEnd+3] ^= 1
			return b
		}),
	}
	for name, data := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, data, 0o600)
		r, err := Open(p)
		if err == nil {
			// A payload's damage shows when the section is read.
			var v vcpuState
			err = r.Section("vcpu.0", 1, &v)
			r.Close()
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
}

func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	p, err := sample(dir)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(p)
	f.Add(good)
	f.Add([]byte("SMOLSNAP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.snap")
		os.WriteFile(p, data, 0o600)
		r, err := Open(p)
		if err != nil {
			return
		}
		defer r.Close()
		for name := range r.sections {
			var v any
			r.Section(name, r.sections[name].version, &v)
		}
		_, off, length := r.RAM()
		if off < 0 || length < 0 || off+length > r.size {
			t.Fatalf("RAM [%d, +%d) outside the %d-byte file", off, length, r.size)
		}
	})
}

// TestDiskRegions: a sparse disk file travels as a region and comes back
// byte for byte, reading and writing only its data.
func TestDiskRegions(t *testing.T) {
	dir := t.TempDir()
	disk, err := os.Create(filepath.Join(dir, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	const diskSize = 64 << 20
	disk.WriteAt([]byte("superblock"), 1024)
	disk.WriteAt(bytes.Repeat([]byte{0xab}, 8192), 40<<20)
	disk.Truncate(diskSize + 7) // not a page multiple
	p := filepath.Join(dir, "m.snap")
	w, err := NewWriter(p)
	if err != nil {
		t.Fatal(err)
	}
	w.Section("vcpu.0", 1, vcpuState{RIP: 1})
	if err := w.Region("disk.0", disk, diskSize+7); err != nil {
		t.Fatal(err)
	}
	if err := w.Region("vcpu.0", disk, 1); err == nil {
		t.Error("a region named like a section was accepted")
	}
	ram := ramImage()
	if err := w.Commit(bytes.NewReader(ram), int64(len(ram))); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	syscall.Stat(p, &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("a snapshot of 16 KiB of data takes %d bytes", st.Blocks*512)
	}
	r, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, ok := r.Region("disk.1"); ok {
		t.Error("a region that is not there")
	}
	_, length, ok := r.Region("disk.0")
	if !ok || length != diskSize+7 {
		t.Fatalf("region disk.0: %v, %d bytes", ok, length)
	}
	out, err := os.Create(filepath.Join(dir, "out.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CopyRegion("disk.0", out); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(disk.Name())
	got, _ := os.ReadFile(out.Name())
	if !bytes.Equal(got, want) {
		t.Error("the disk differs after the round trip")
	}
	syscall.Stat(out.Name(), &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("the copied disk is not sparse: %d bytes allocated", st.Blocks*512)
	}
	f, off, n := r.RAM()
	gotRAM := make([]byte, n)
	f.ReadAt(gotRAM, off)
	if !bytes.Equal(gotRAM, ram) {
		t.Error("RAM differs beside a disk region")
	}
}
