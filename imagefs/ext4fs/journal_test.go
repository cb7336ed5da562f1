package ext4fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestJournal: a writable disk with a journal passes e2fsck, and the
// filesystem's own tools see the journal as an empty, clean one of the
// size asked for.
func TestJournal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "storage.ext4")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := New(f, Options{MaxBytes: 1 << 20, Label: "storage", Spare: 256 << 20, Now: mtime, UUID: [16]byte{9}, JournalBlocks: 4096})
	if err != nil {
		t.Fatal(err)
	}
	file(t, w, w.Root(), "hello", 0o644, 0, 0, strings.NewReader("hello\n"))
	finish(t, w, p)
	if _, err := exec.LookPath("dumpe2fs"); err != nil {
		t.Skip("dumpe2fs not installed (e2fsprogs)")
	}
	out, err := exec.Command("dumpe2fs", "-h", p).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v\n%s", err, out)
	}
	for _, want := range []string{"has_journal", "Journal inode:            8", "Total journal size:       16M", "Journal start:            0"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dumpe2fs lacks %q:\n%s", want, out)
		}
	}
	// The journal costs the host one block until the guest uses it.
	fi, _ := os.Stat(p)
	if fi.Size() < 16<<20 {
		t.Errorf("image of %d bytes cannot hold a 16 MiB journal", fi.Size())
	}
	for _, bad := range []uint32{1, 1023, maxJournalBlocks + 1} {
		f2, _ := os.CreateTemp(t.TempDir(), "x")
		if _, err := New(f2, Options{MaxBytes: 1 << 20, JournalBlocks: bad}); err == nil {
			t.Errorf("a journal of %d blocks was accepted", bad)
		}
		f2.Close()
	}
}
