// Package gltri builds and reads gltri, a small OpenGL ES program
// (src/gltri.c) that draws through EGL on Mesa's surfaceless platform and
// prints what it read back. The same binary runs in a guest with
// --gpu=virgl and on the host, which is how the 3D tests and benchmark
// compare virgl with the host's own renderer.
package gltri

import (
	_ "embed"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/smolvm/smol/internal/debimage"
)

//go:embed src/gltri.c
var source []byte

// Build compiles gltri with the host's gcc against its EGL and GLESv2
// (Debian's libegl-dev and libgles-dev) into cacheDir, once per source,
// and returns the binary's path. It runs in a guest whose image has the
// same Debian's libegl1 and libgles2.
func Build(cacheDir string) (string, error) {
	h := fnv.New64a()
	h.Write(source)
	out := filepath.Join(cacheDir, "gltri", "gltri-"+strconv.FormatUint(h.Sum64(), 16))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	src := out + ".c"
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", err
	}
	defer os.Remove(src)
	tmp := out + ".tmp"
	if msg, err := exec.Command("gcc", "-O2", "-Wall", "-o", tmp, src, "-lEGL", "-lGLESv2").CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile gltri (gcc, libegl-dev and libgles-dev; make deps installs them): %v: %s", err, msg)
	}
	return out, os.Rename(tmp, out)
}

// Result is what gltri printed: renderer, center, corner, hash, and for a
// benchmark ms.
type Result map[string]string

// Parse reads gltri's "key: value" lines.
func Parse(out string) Result {
	r := Result{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			r[k] = v
		}
	}
	return r
}

// Millis returns a benchmark's time in milliseconds.
func (r Result) Millis() (float64, error) {
	ms, err := strconv.ParseFloat(r["ms"], 64)
	if err != nil {
		return 0, fmt.Errorf("gltri printed no time (%q)", r["ms"])
	}
	return ms, nil
}

// Packages are the Debian packages gltri needs in a guest: Mesa's EGL and
// GLES and its DRI drivers (virtio_gpu_dri.so is the guest side of virgl).
var Packages = []string{"libegl1", "libgles2", "libegl-mesa0", "libgl1-mesa-dri"}

// Image is a Debian image with gltri (the binary at bin) as
// /usr/local/bin/gltri.
func Image(bin string) debimage.Image {
	return debimage.Image{Packages: Packages, Files: map[string]string{"/usr/local/bin/gltri": bin}}
}
