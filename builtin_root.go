package smol

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/smolvm/smol/internal/guestbin"
	"github.com/u-root/u-root/pkg/cpio"
)

// BuiltinRoot is the image name a machine created without an image shows:
// smol's own busybox userland, the one `smol run -- CMD` runs commands in.
const BuiltinRoot = "smol:busybox"

// builtinRootImage returns the read-only root of a machine created
// without an image. It is made from the busybox in the agent's initramfs
// (so it matches the smol that made it), as an ordinary image: a
// docker-save tarball kept under $SMOL_HOME/builtin, named after the
// initramfs's digest and deterministic, that the image store caches like
// any other local image.
func builtinRootImage(ctx context.Context, images *imagefs.Store, progress io.Writer) (*imagefs.Image, error) {
	path, err := builtinRootTarball(filepath.Join(MachineHome(), "builtin"))
	if err != nil {
		return nil, err
	}
	return images.Get(ctx, path, imagefs.Options{Pull: imagefs.PullMissing, Progress: progress})
}

// builtinRootTarball returns the path in dir of the no-image root's
// tarball for this smol's agent initramfs, writing it first if it is not
// there. The initramfs is read only then, or to hash it when its digest
// is not known: the embedded one's is (guestbin.AgentSum). Every machine
// created without an image (every pod of the containerd shim) comes
// here, and hashing 5 MiB where the CPU has no SHA instructions (the test
// box's emulated one) is not free.
func builtinRootTarball(dir string) (string, error) {
	initrd, err := DefaultAgentInitrd()
	if err != nil {
		return "", err
	}
	var data []byte
	sum := guestbin.AgentSum()
	if embedded, err := guestbin.Agent(); err != nil || embedded != initrd {
		if data, err = os.ReadFile(initrd); err != nil {
			return "", err
		}
		s := sha256.Sum256(data)
		sum = hex.EncodeToString(s[:])
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "busybox-"+sum[:16]+".tar")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if data == nil {
		if data, err = os.ReadFile(initrd); err != nil {
			return "", err
		}
	}
	layer, err := busyboxLayer(data)
	if err != nil {
		return "", fmt.Errorf("smol's busybox root from %s: %w", initrd, err)
	}
	if err := writeBuiltinImage(path, layer); err != nil {
		return "", err
	}
	return path, nil
}

// busyboxLayer is the root's one layer: busybox and its applet links from
// the initramfs, the directories a shell session expects, and root and
// nobody accounts. Every entry has the same time, so the layer (and the
// image's digest) depends only on the initramfs.
func busyboxLayer(initramfs []byte) ([]byte, error) {
	records, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(initramfs)))
	if err != nil {
		return nil, err
	}
	var busybox []byte
	var applets []string
	for _, r := range records {
		switch {
		case r.Name == "bin/busybox" && r.Mode&cpio.S_IFMT == cpio.S_IFREG:
			if busybox, err = io.ReadAll(io.NewSectionReader(r, 0, int64(r.FileSize))); err != nil {
				return nil, err
			}
		case strings.HasPrefix(r.Name, "bin/") && r.Mode&cpio.S_IFMT == cpio.S_IFLNK:
			target, err := io.ReadAll(io.NewSectionReader(r, 0, int64(r.FileSize)))
			if err != nil {
				return nil, err
			}
			if string(target) == "busybox" {
				applets = append(applets, strings.TrimPrefix(r.Name, "bin/"))
			}
		}
	}
	if busybox == nil {
		return nil, fmt.Errorf("the initramfs has no bin/busybox")
	}
	sort.Strings(applets)
	epoch := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = epoch, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dirs := []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"home/", 0o755}, {"proc/", 0o755}, {"root/", 0o700},
		{"run/", 0o755}, {"sys/", 0o755}, {"tmp/", 0o1777}, {"usr/", 0o755}, {"var/", 0o755}}
	for _, d := range dirs {
		if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode}, nil); err != nil {
			return nil, err
		}
	}
	files := []struct {
		name string
		mode int64
		body []byte
	}{
		{"bin/busybox", 0o755, busybox},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
	for _, f := range files {
		if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.body))}, f.body); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if err := add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeBuiltinImage writes the one-layer image as a docker-save tarball,
// atomically.
func writeBuiltinImage(path string, layerTar []byte) error {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config = v1.Config{Env: []string{"PATH=/bin", "HOME=/root"}, Cmd: []string{"sh"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	ref, err := name.NewTag("smol/busybox:latest")
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := tarball.Write(ref, img, &out); err != nil {
		return err
	}
	return atomicfile.Write(path, out.Bytes())
}
