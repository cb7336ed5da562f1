package smol

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/smolvm/smol/internal/guestbin"
	"github.com/u-root/u-root/pkg/cpio"
)

// TestBusyboxLayerFromTheAgentInitramfs builds the no-image root's layer
// from the agent initramfs the build made: busybox with its applets and
// the accounts, the same bytes every time.
func TestBusyboxLayerFromTheAgentInitramfs(t *testing.T) {
	initrd, err := DefaultAgentInitrd()
	if err != nil {
		t.Skipf("no agent initramfs (make guest): %v", err)
	}
	data, err := os.ReadFile(initrd)
	if err != nil {
		t.Fatal(err)
	}
	a, err := busyboxLayer(data)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := busyboxLayer(data)
	if !bytes.Equal(a, b) {
		t.Fatal("the layer differs between two builds from one initramfs")
	}
	seen := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = h
	}
	if h := seen["bin/busybox"]; h == nil || h.Size < 100<<10 || h.Mode&0o111 == 0 {
		t.Fatalf("bin/busybox: %+v", h)
	}
	if h := seen["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Fatalf("bin/sh: %+v", h)
	}
	for _, name := range []string{"etc/passwd", "root/", "tmp/"} {
		if seen[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	if seen["init"] != nil {
		t.Error("the agent itself is in the root")
	}
	if _, err := busyboxLayer([]byte("not a cpio archive")); err == nil {
		t.Error("garbage accepted as an initramfs")
	}
}

// TestBuiltinRootTarballIsNamedByTheInitramfs: the tarball is named after
// the initramfs's digest, written once, and another initramfs gets
// another tarball.
func TestBuiltinRootTarballIsNamedByTheInitramfs(t *testing.T) {
	dir := t.TempDir()
	initrd := filepath.Join(dir, "agent.cpio")
	writeInitramfs := func(busybox string) []byte {
		var buf bytes.Buffer
		w := cpio.Newc.Writer(&buf)
		if err := cpio.WriteRecordsAndDirs(w, []cpio.Record{
			cpio.Directory("bin", 0o755),
			cpio.StaticFile("bin/busybox", busybox, 0o755),
			cpio.Symlink("bin/sh", "busybox"),
		}); err != nil {
			t.Fatal(err)
		}
		if err := cpio.WriteTrailer(w); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(initrd, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	t.Setenv("SMOL_AGENT_INITRD", initrd)
	out := filepath.Join(dir, "builtin")

	data := writeInitramfs("first busybox")
	sum := sha256.Sum256(data)
	path, err := builtinRootTarball(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "busybox-"+hex.EncodeToString(sum[:8])+".tar"); path != want {
		t.Fatalf("tarball %s, want %s", path, want)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := builtinRootTarball(out); err != nil || again != path {
		t.Fatalf("second call: %s, %v", again, err)
	}
	if after, _ := os.Stat(path); !after.ModTime().Equal(before.ModTime()) {
		t.Error("the tarball was written again")
	}

	writeInitramfs("second busybox")
	other, err := builtinRootTarball(out)
	if err != nil {
		t.Fatal(err)
	}
	if other == path {
		t.Error("a different initramfs got the same tarball")
	}
}

// TestEmbeddedAgentSumIsItsDigest: the digest builtinRootTarball takes on
// trust for the embedded initramfs is that of the file smol extracts.
func TestEmbeddedAgentSumIsItsDigest(t *testing.T) {
	p, err := guestbin.Agent()
	if err != nil {
		t.Skipf("no embedded agent in this build: %v", err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != guestbin.AgentSum() {
		t.Fatal("guestbin.AgentSum is not the extracted file's sha256")
	}
}
