package sparsefile

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCloneKeepsContentsAndHoles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.WriteAt(bytes.Repeat([]byte{7}, 100<<10), 100<<20)
	f.Truncate(256 << 20)
	f.Close()
	dst := filepath.Join(dir, "dst")
	if _, err := Clone(src, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("the clone differs")
	}
	var st syscall.Stat_t
	syscall.Stat(dst, &st)
	if st.Blocks*512 > 8<<20 {
		t.Errorf("a clone of 100 KiB of data takes %d bytes", st.Blocks*512)
	}
	if _, err := Clone(src, dst); err == nil {
		t.Error("a clone over an existing file")
	}
	if _, err := Clone(filepath.Join(dir, "missing"), filepath.Join(dir, "x")); err == nil {
		t.Error("a clone of a missing file")
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a failed clone left its file")
	}
}
