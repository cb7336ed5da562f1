package blk

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newImage writes a raw image of size bytes filled with a pattern that
// differs per sector, so misplaced I/O shows.
func newImage(t *testing.T, size int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, pattern(size, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// pattern returns n bytes whose value depends on the offset and seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i/SectorSize) ^ byte(i) ^ seed
	}
	return b
}

func openT(t *testing.T, path string, readOnly bool) *Disk {
	t.Helper()
	d, err := Open(path, readOnly)
	if err != nil {
		t.Fatalf("Open(%s, %v): %v", path, readOnly, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func allocatedBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestOpenErrorsArePhrasedForPeople(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.img")
	_, err := Open(missing, false)
	if err == nil || err.Error() != "disk "+missing+": no such file" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
	for _, ro := range []bool{false, true} {
		_, err = Open(dir, ro)
		if err == nil || err.Error() != "disk "+dir+": is a directory" {
			t.Errorf("directory (ro=%v): got %v", ro, err)
		}
	}
	_, err = Open("/dev/null", true)
	if err == nil || !strings.Contains(err.Error(), "not a regular file or block device") {
		t.Errorf("/dev/null: got %v", err)
	}
	tiny := filepath.Join(dir, "tiny.img")
	os.WriteFile(tiny, make([]byte, 100), 0o644)
	_, err = Open(tiny, false)
	if err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("100-byte image: got %v", err)
	}
}

func TestOpenUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root bypasses file permissions")
	}
	path := newImage(t, 4096)
	os.Chmod(path, 0o200)
	_, err := Open(path, true)
	if err == nil || !strings.Contains(err.Error(), "permission denied") || !errors.Is(err, fs.ErrPermission) {
		t.Errorf("unreadable image: got %v", err)
	}
}

func TestCapacityRoundsDownToWholeSectors(t *testing.T) {
	path := newImage(t, 3*SectorSize+100)
	d := openT(t, path, false)
	if d.Sectors() != 3 {
		t.Errorf("Sectors = %d, want 3", d.Sectors())
	}
}

func TestLocksExcludeWritersAcrossOpens(t *testing.T) {
	path := newImage(t, 8192)
	for _, tc := range []struct {
		name          string
		first, second bool // readOnly of each Open
		conflict      bool
	}{
		{"rw then rw", false, false, true},
		{"rw then ro", false, true, true},
		{"ro then rw", true, false, true},
		{"ro then ro", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Open(path, tc.first)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Open(path, tc.second)
			if tc.conflict {
				if !errors.Is(err, ErrDiskInUse) {
					t.Fatalf("second Open: got %v, want ErrDiskInUse", err)
				}
				if want := "disk " + path + " is already in use by another VM"; err.Error() != want {
					t.Errorf("message %q, want %q", err, want)
				}
			} else if err != nil {
				t.Fatalf("second Open: %v", err)
			} else {
				b.Close()
			}
			// Closing the holder releases the lock.
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			c, err := Open(path, tc.second)
			if err != nil {
				t.Fatalf("Open after Close: %v", err)
			}
			c.Close()
		})
	}
}

func TestVectoredReadWriteRoundTrip(t *testing.T) {
	const size = 64 * SectorSize
	path := newImage(t, size)
	d := openT(t, path, false)

	// More buffers than one preadv call takes, of uneven sizes, some empty.
	var bufs [][]byte
	want := pattern(3*1024+SectorSize, 7)[:iovMax*3]
	for rest := want; len(rest) > 0; {
		n := min(len(rest), 1+len(bufs)%5)
		bufs = append(bufs, append([]byte(nil), rest[:n]...), nil)
		rest = rest[n:]
	}
	n, err := d.WriteAt(bufs, 5*SectorSize)
	if err != nil || n != len(want) {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	file, _ := os.ReadFile(path)
	if !bytes.Equal(file[5*SectorSize:5*SectorSize+len(want)], want) {
		t.Fatal("file content differs from what was written")
	}
	if !bytes.Equal(file[:5*SectorSize], pattern(size, 1)[:5*SectorSize]) {
		t.Fatal("write touched bytes before its offset")
	}

	read := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		read = append(read, make([]byte, len(b)))
	}
	n, err = d.ReadAt(read, 5*SectorSize)
	if err != nil || n != len(want) {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	if got := bytes.Join(read, nil); !bytes.Equal(got, want) {
		t.Fatal("read back differs")
	}
	if _, err := d.ReadAt([][]byte{make([]byte, 2*SectorSize)}, size-SectorSize); err == nil {
		t.Error("read past the end of the file succeeded")
	}
	if err := d.Flush(); err != nil {
		t.Error(err)
	}
}

func TestReadOnlyDiskRefusesChanges(t *testing.T) {
	path := newImage(t, 8192)
	d := openT(t, path, true)
	if _, err := d.WriteAt([][]byte{make([]byte, SectorSize)}, 0); err == nil {
		t.Error("WriteAt on a read-only disk succeeded")
	}
	if err := d.Discard(0, SectorSize); err == nil {
		t.Error("Discard on a read-only disk succeeded")
	}
	if err := d.WriteZeroes(0, SectorSize, false); err == nil {
		t.Error("WriteZeroes on a read-only disk succeeded")
	}
	if err := d.Flush(); err != nil {
		t.Errorf("Flush on a read-only disk: %v", err)
	}
	if file, _ := os.ReadFile(path); !bytes.Equal(file, pattern(8192, 1)) {
		t.Error("read-only disk changed")
	}
}

func TestDiscardAndWriteZeroesPunchAndZero(t *testing.T) {
	const mib = 1 << 20
	path := newImage(t, 4*mib)
	d := openT(t, path, false)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	before := allocatedBytes(t, path)
	if before < 4*mib {
		t.Skipf("image not fully allocated (%d bytes); cannot measure holes", before)
	}

	if err := d.Discard(mib, mib); err != nil {
		t.Fatal(err)
	}
	afterDiscard := allocatedBytes(t, path)
	if afterDiscard > before-mib {
		t.Errorf("discard of 1 MiB freed %d bytes", before-afterDiscard)
	}

	// Write zeroes without unmap keeps the blocks (ZERO_RANGE may convert
	// them to unwritten extents but does not free them).
	if err := d.WriteZeroes(2*mib, mib, false); err != nil {
		t.Fatal(err)
	}
	// With unmap it punches.
	if err := d.WriteZeroes(3*mib, mib, true); err != nil {
		t.Fatal(err)
	}
	afterUnmap := allocatedBytes(t, path)
	if afterUnmap > afterDiscard-mib {
		t.Errorf("write zeroes with unmap freed %d bytes", afterDiscard-afterUnmap)
	}

	file, _ := os.ReadFile(path)
	if len(file) != 4*mib {
		t.Fatalf("file size changed to %d", len(file))
	}
	if !bytes.Equal(file[:mib], pattern(4*mib, 1)[:mib]) {
		t.Error("data before the discarded range changed")
	}
	if !bytes.Equal(file[mib:], make([]byte, 3*mib)) {
		t.Error("discarded / zeroed ranges do not read as zeroes")
	}
}

func TestWriteZeroesFallbackWritesZeroes(t *testing.T) {
	path := newImage(t, 3*zeroChunk)
	d := openT(t, path, false)
	if err := d.writeZeroBytes(SectorSize, 2*zeroChunk+SectorSize); err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(path)
	want := pattern(3*zeroChunk, 1)
	copy(want[SectorSize:], make([]byte, 2*zeroChunk+SectorSize))
	if !bytes.Equal(file, want) {
		t.Error("fallback zeroing wrote the wrong bytes")
	}
}

func TestClosedDiskFailsIO(t *testing.T) {
	d, err := Open(newImage(t, 4096), false)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := d.ReadAt([][]byte{make([]byte, SectorSize)}, 0); err == nil {
		t.Error("read after Close succeeded")
	}
}

func TestSerialIsStableAndDistinct(t *testing.T) {
	p1, p2 := newImage(t, 4096), newImage(t, 4096)
	a := openT(t, p1, true)
	s1 := a.Serial()
	a.Close()
	b := openT(t, p1, true)
	c := openT(t, p2, true)
	if b.Serial() != s1 {
		t.Errorf("serial changed across opens: %q then %q", s1, b.Serial())
	}
	if c.Serial() == s1 {
		t.Errorf("two images share serial %q", s1)
	}
	if len(s1) > IDBytes {
		t.Errorf("serial %q longer than %d bytes", s1, IDBytes)
	}
}
