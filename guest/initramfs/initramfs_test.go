package initramfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"
)

func TestArchiveRoundTrip(t *testing.T) {
	a := New()
	a.AddFile("init", []byte("#!/bin/sh\necho hi\n"), 0o755)
	a.AddFile("etc/deep/file", []byte("x"), 0o644)
	a.AddSymlink("bin/sh", "busybox")
	p := filepath.Join(t.TempDir(), "initrd.cpio")
	if err := a.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := cpio.ReadAllRecords(cpio.Newc.Reader(f))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cpio.Record{}
	for _, r := range records {
		got[r.Name] = r
	}
	for _, want := range []string{"init", "etc", "etc/deep", "etc/deep/file", "bin/sh", "dev/console", "proc"} {
		if _, ok := got[want]; !ok {
			t.Errorf("archive lacks %s", want)
		}
	}
	if c := got["dev/console"]; c.Mode&cpio.S_IFMT != cpio.S_IFCHR || c.Rmajor != 5 || c.Rminor != 1 {
		t.Errorf("dev/console = %v", c.Info)
	}
	if l := got["bin/sh"]; l.Mode&cpio.S_IFMT != cpio.S_IFLNK {
		t.Errorf("bin/sh is not a symlink: %v", l.Info)
	}
	if got["init"].Mode&0o777 != 0o755 {
		t.Errorf("init mode %o", got["init"].Mode)
	}
}
