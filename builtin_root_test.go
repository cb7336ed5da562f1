package smol

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"testing"
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
