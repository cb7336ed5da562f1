package main

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMaskPaths: in a mount namespace of its own (on a thread that is
// never given back), a masked file reads as empty, a masked directory is
// empty and refuses writes, a read-only directory refuses writes, missing
// paths are skipped, and a symlink out of the root masks nothing outside
// it.
func TestMaskPaths(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	root := t.TempDir()
	for _, d := range []string{"hidden", "ro"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "outside")
	for path, body := range map[string]string{"secret": "s3cret", "hidden/inner": "x", outside: "the host's"} {
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return err
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return err
			}
			rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(rootFD)
			if err := maskPaths(rootFD, []string{"/secret", "/hidden", "/missing", "/escape"}, []string{"/ro", "/missing/too"}); err != nil {
				return err
			}
			if b, err := os.ReadFile(filepath.Join(root, "secret")); err != nil || len(b) != 0 {
				t.Errorf("the masked file reads %q, %v", b, err)
			}
			if entries, err := os.ReadDir(filepath.Join(root, "hidden")); err != nil || len(entries) != 0 {
				t.Errorf("the masked directory lists %v, %v", entries, err)
			}
			for _, p := range []string{"hidden/new", "ro/new"} {
				if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); !errors.Is(err, unix.EROFS) {
					t.Errorf("writing %s: %v, want EROFS", p, err)
				}
			}
			if b, err := os.ReadFile(outside); err != nil || string(b) != "the host's" {
				t.Errorf("the file outside the root the symlink names reads %q, %v", b, err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Outside that namespace nothing changed.
	if b, err := os.ReadFile(filepath.Join(root, "secret")); err != nil || string(b) != "s3cret" {
		t.Errorf("the file in the test's own namespace reads %q, %v", b, err)
	}
}
