package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/smolvm/smol/box"
)

// Debian test images: a minbase root of this suite with some packages
// (and files), built by debootstrap from Debian's archive, packed as a
// docker-save tarball and cached per machine.
const (
	debianSuite  = "bookworm"
	debianMirror = "http://deb.debian.org/debian"
	// debianRecipe names the way a root is built, trimmed and packed:
	// change it with those steps so cached tarballs are rebuilt.
	debianRecipe = "minbase-slim-docker-uncompressed-1"
)

// debianImage is one Debian test image. The host builds it before
// box.Main moves the tests into the box (the box has no network, and
// debootstrap under its software CPU would take many minutes), only for a
// test binary that will run test, and tells the box where it is, or why
// there is none, through the environment the box's command inherits. A
// first build (one to several minutes, more on a loaded machine) counts
// against go test's -timeout: it fits make test's, not always the default
// 10m.
type debianImage struct {
	test     string            // the top-level test that uses it
	env      string            // its path in the box's environment; env+"_ERROR" the failure
	packages []string          // installed with debootstrap --include
	files    map[string]string // path in the root -> a host file copied there (mode 0755)
	// prebuild, if set, runs on the host first (e.g. to compile a file
	// for files); its error fails the image.
	prebuild func(*debianImage) error

	once sync.Once
	out  string
	err  error
}

// prepare builds the image on the host, before the box, when this test
// binary will run the image's test.
func (d *debianImage) prepare() {
	if box.InBox() || !testSelected(d.test) {
		return
	}
	os.Unsetenv(d.env)
	os.Unsetenv(d.env + "_ERROR")
	p, err := d.build()
	if err != nil {
		os.Setenv(d.env+"_ERROR", err.Error())
		return
	}
	os.Setenv(d.env, p)
}

// path returns the image tarball for a test: the one the host built
// before the box (inside it), or built now (on a host that boots guests
// itself).
func (d *debianImage) path(t *testing.T) string {
	t.Helper()
	if !box.InBox() {
		p, err := d.build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if msg := os.Getenv(d.env + "_ERROR"); msg != "" {
		t.Fatalf("building the Debian test image on the host failed: %s", msg)
	}
	p := os.Getenv(d.env)
	if p == "" {
		t.Fatalf("the host built no Debian test image before the box (%s is unset)", d.env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the Debian test image the host built is not visible in the box: %v", err)
	}
	return p
}

func (d *debianImage) build() (string, error) {
	d.once.Do(func() { d.out, d.err = d.buildOnce() })
	return d.out, d.err
}

// buildOnce returns the path of the image tarball, building it first when
// this machine has none cached: under the cache's debian/, named by a
// hash of the suite, the recipe, the packages and the files' contents.
func (d *debianImage) buildOnce() (string, error) {
	if d.prebuild != nil {
		if err := d.prebuild(d); err != nil {
			return "", err
		}
	}
	cache, err := smolCache()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, strings.Join([]string{debianSuite, "amd64", debianRecipe, strings.Join(d.packages, ",")}, "\n"))
	dests := make([]string, 0, len(d.files))
	for dest := range d.files {
		dests = append(dests, dest)
	}
	sort.Strings(dests)
	for _, dest := range dests {
		f, err := os.Open(d.files[dest])
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "\n%s\n", dest)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	dir := filepath.Join(cache, "debian")
	out := filepath.Join(dir, debianSuite+"-"+hex.EncodeToString(h.Sum(nil)[:8])+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "integration: building the Debian %s test image with %s (debootstrap: a minute or more, once per machine; cached as %s)\n",
		debianSuite, strings.Join(d.packages, ", "), out)
	if err := d.buildImage(dir, out); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "integration: Debian test image built in %v\n", time.Since(start).Round(time.Second))
	return out, nil
}

// buildImage runs debootstrap into a private directory under dir, trims
// the root the way Debian's slim container images are trimmed, copies the
// files in, and writes it to out as a one-layer docker-save tarball. The
// root (setuid programs, device nodes and all) exists on the host only
// while it is packed.
func (d *debianImage) buildImage(dir, out string) (err error) {
	bootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("debootstrap is not installed (scripts/install-deps.sh installs it): %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("debootstrap needs root (it creates device nodes and runs the packages' scripts in a chroot); run the integration tests as root")
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	root := filepath.Join(work, "root")
	defer func() {
		// debootstrap mounts /proc and /sys in the root while it runs; a
		// removal must never descend into a mount.
		if uerr := unmountUnder(root); uerr != nil {
			err = errors.Join(err, fmt.Errorf("%v; leaving %s in place", uerr, work))
			return
		}
		os.RemoveAll(work)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	logPath := filepath.Join(work, "debootstrap.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bootstrap, "--variant=minbase", "--arch=amd64",
		"--include="+strings.Join(d.packages, ","), debianSuite, root, debianMirror)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	runErr := cmd.Run()
	logFile.Close()
	if runErr != nil {
		return fmt.Errorf("debootstrap %s from %s failed (%v); is the archive reachable from this machine? last lines of its log:\n%s",
			debianSuite, debianMirror, runErr, tail(logPath, 15))
	}

	for _, pattern := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*",
		"usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	if err := unmountUnder(root); err != nil {
		return err
	}
	for dest, src := range d.files {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.Clean("/"+dest))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o755); err != nil {
			return err
		}
	}

	// GNU tar keeps owners by number, hard links, device nodes and xattrs.
	layerPath := filepath.Join(work, "layer.tar")
	if msg, err := exec.CommandContext(ctx, "tar", "--create", "--file", layerPath, "--directory", root,
		"--format=posix", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--sort=name", ".").CombinedOutput(); err != nil {
		return fmt.Errorf("pack the Debian root: %v: %s", err, msg)
	}
	tmp := filepath.Join(work, "image.tar")
	if err := writeDockerSave(tmp, layerPath, "smol.test/debian:"+debianSuite, v1.Config{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"bash"},
	}); err != nil {
		return fmt.Errorf("write the Debian image: %w", err)
	}
	return os.Rename(tmp, out)
}
