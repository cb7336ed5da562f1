// Package gltri builds and reads the 3D tests' OpenGL ES programs: gltri
// (src/gltri.c) draws through EGL on Mesa's surfaceless platform and
// prints what it read back; the same binary runs in a guest with
// --gpu=virgl and on the host, which is how the 3D tests and benchmark
// compare virgl with the host's own renderer. glscan (src/glscan.c) shows
// a picture on the guest's display the way a compositor does (GBM, EGL,
// KMS).
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
var gltriSource []byte

//go:embed src/glscan.c
var glscanSource []byte

// Programs are the built binaries.
type Programs struct {
	Gltri  string // offscreen drawing, read back (src/gltri.c)
	Glscan string // a picture on the display through GBM and KMS (src/glscan.c)
}

// Build compiles the programs with the host's gcc against its EGL,
// GLESv2, GBM and libdrm (Debian's libegl-dev, libgles-dev, libgbm-dev,
// libdrm-dev) into cacheDir, once per source, and returns their paths.
// They run in a guest whose image has the same Debian's libraries
// (Image).
func Build(cacheDir string) (Programs, error) {
	h := fnv.New64a()
	h.Write(gltriSource)
	h.Write(glscanSource)
	dir := filepath.Join(cacheDir, "gltri", strconv.FormatUint(h.Sum64(), 16))
	p := Programs{Gltri: filepath.Join(dir, "gltri"), Glscan: filepath.Join(dir, "glscan")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Programs{}, err
	}
	for _, prog := range []struct {
		out  string
		src  []byte
		libs []string
	}{
		{p.Gltri, gltriSource, []string{"-lEGL", "-lGLESv2"}},
		{p.Glscan, glscanSource, []string{"-I/usr/include/libdrm", "-ldrm", "-lgbm", "-lEGL", "-lGLESv2"}},
	} {
		if err := compile(prog.out, prog.src, prog.libs); err != nil {
			return Programs{}, err
		}
	}
	return p, nil
}

// compile builds src into out unless out exists.
func compile(out string, src []byte, libs []string) error {
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	srcPath := out + ".c"
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		return err
	}
	defer os.Remove(srcPath)
	tmp := out + ".tmp"
	args := append([]string{"-O2", "-Wall", "-o", tmp, srcPath}, libs...)
	if msg, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("compile %s (gcc, libegl-dev, libgles-dev, libgbm-dev and libdrm-dev; make deps installs them): %v: %s",
			filepath.Base(out), err, msg)
	}
	return os.Rename(tmp, out)
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

// Packages are the Debian packages the programs need in a guest: Mesa's
// EGL, GLES and GBM, its DRI drivers (virtio_gpu_dri.so is the guest side
// of virgl), libdrm.
var Packages = []string{"libegl1", "libgles2", "libegl-mesa0", "libgl1-mesa-dri", "libgbm1", "libdrm2"}

// Image is a Debian image with the programs in /usr/local/bin.
func Image(p Programs) debimage.Image {
	return debimage.Image{Packages: Packages, Files: map[string]string{
		"/usr/local/bin/gltri":  p.Gltri,
		"/usr/local/bin/glscan": p.Glscan,
	}}
}
