package inroot

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountPointStaysInside: symlinks that point out of the root, through
// ".." or absolutely, and dangling ones, lead to paths inside it; what is
// missing is made there, a directory or a file as asked.
func TestMountPointStaysInside(t *testing.T) {
	dir := t.TempDir()
	root, outside := filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	for _, d := range []string{filepath.Join(root, "etc"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{"etc/abs": outside, "etc/up": "../../../outside", "etc/dangling": "/nowhere/file", "up": "../.."}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)
	for _, c := range []struct {
		dest, made string
		dir        bool
	}{
		{"/etc/abs/made", filepath.Join(outside, "made"), true}, // must land in root/<outside>/made
		{"/etc/up/made2", filepath.Join(dir, "outside", "made2"), false},
		{"/etc/dangling", "/nowhere/file", false},
		{"/up/a/b", filepath.Join(dir, "a"), true},
	} {
		fd, err := MountPoint(rootFD, c.dest, c.dir)
		if err != nil {
			t.Errorf("%s: %v", c.dest, err)
			continue
		}
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		unix.Close(fd)
		if (st.Mode&unix.S_IFMT == unix.S_IFDIR) != c.dir {
			t.Errorf("%s: mode %o, want a directory: %v", c.dest, st.Mode, c.dir)
		}
		if _, err := os.Lstat(c.made); !os.IsNotExist(err) {
			t.Errorf("%s made %s, outside the root: %v", c.dest, c.made, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc", "abs")); err != nil || !fi.IsDir() {
		t.Errorf("the absolute symlink, dangling in the root, was not replaced by a directory: %v, %v", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc", "dangling")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the dangling symlink was not replaced by a file: %v, %v", fi, err)
	}
}
