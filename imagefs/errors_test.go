package imagefs

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// TestDiskFullLeavesNoEntry fills the cache's filesystem mid-build: a
// 16 MiB tmpfs as SMOL_HOME and an image of 24 MiB of incompressible data.
// The pull must fail with a message saying so, and leave neither a cache
// entry nor a temporary directory behind. It needs root (mount).
func TestDiskFullLeavesNoEntry(t *testing.T) {
	home := t.TempDir()
	if err := unix.Mount("tmpfs", home, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root): %v", err)
	}
	defer unix.Unmount(home, unix.MNT_DETACH)

	big := make([]byte, 24<<20)
	rand.Read(big)
	img := image(t, "amd64", v1.Config{Cmd: []string{"/x"}}, layer(t, file("big", string(big))))
	saved := filepath.Join(t.TempDir(), "big.tar")
	tag, _ := name.NewTag("example.com/big:1")
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}

	s := openStore(t, home)
	_, err := s.Get(t.Context(), saved, Options{})
	if err == nil {
		t.Fatal("a 24 MiB image fit in a 16 MiB cache")
	}
	if msg := err.Error(); !strings.Contains(msg, "no space") || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line saying the disk is full", msg)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Errorf("a failed build is listed: %+v", list)
	}
	var leftovers []string
	filepath.Walk(s.root, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), ".tmp-") {
			leftovers = append(leftovers, p)
		}
		return nil
	})
	if len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

func TestMissingLocalPathIsNotARegistryRef(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, ref := range []string{"/nonexistent/img.tar", "./img", "../img", "img.tar"} {
		_, err := s.Get(t.Context(), ref, Options{})
		if err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("Get(%q) = %v; want a missing-file error, without asking a registry", ref, err)
		}
	}
}
