// Package debimage builds Debian test images: a minbase root of one suite
// with the packages (and files) asked for, made by debootstrap from
// Debian's archive, trimmed like Debian's slim container images, packed as
// a one-layer docker-save tarball that smol runs with --image, and cached
// per machine. The integration tests and benchmarks use it; it needs root
// and the archive.
package debimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

const (
	// Suite and Mirror are where the roots come from.
	Suite  = "bookworm"
	Mirror = "http://deb.debian.org/debian"
	// recipe names the way a root is built, trimmed and packed: change
	// it with those steps so cached tarballs are rebuilt.
	recipe = "minbase-slim-docker-uncompressed-1"
)

// Image says what goes into a root.
type Image struct {
	Packages []string          // debootstrap --include
	Files    map[string]string // path in the root -> a host file copied there (mode 0755)
}

// CacheDir is the per-machine build cache (guest/kernel/build.sh's):
// $SMOL_CACHE, else $XDG_CACHE_HOME/smol, else ~/.cache/smol.
func CacheDir() (string, error) {
	if d := os.Getenv("SMOL_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "smol"), nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, ".cache", "smol"), nil
}

// Build returns the path of img's tarball under the cache's debian/,
// named by a hash of the suite, the recipe, the packages and the files'
// contents, building it first when this machine has none. It says so on
// progress (a first build takes a minute or more).
func Build(img Image, progress io.Writer) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, strings.Join([]string{Suite, "amd64", recipe, strings.Join(img.Packages, ",")}, "\n"))
	dests := make([]string, 0, len(img.Files))
	for dest := range img.Files {
		dests = append(dests, dest)
	}
	sort.Strings(dests)
	for _, dest := range dests {
		f, err := os.Open(img.Files[dest])
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
	out := filepath.Join(dir, Suite+"-"+hex.EncodeToString(h.Sum(nil)[:8])+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	fmt.Fprintf(progress, "building the Debian %s test image with %s (debootstrap: a minute or more, once per machine; cached as %s)\n",
		Suite, strings.Join(img.Packages, ", "), out)
	if err := build(img, dir, out); err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "Debian test image built in %v\n", time.Since(start).Round(time.Second))
	return out, nil
}

// build runs debootstrap into a private directory under dir, trims the
// root, copies the files in, and writes it to out. The root (setuid
// programs, device nodes and all) exists on the host only while it is
// packed.
func build(img Image, dir, out string) (err error) {
	bootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("debootstrap is not installed (scripts/install-deps.sh installs it): %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("debootstrap needs root (it creates device nodes and runs the packages' scripts in a chroot); run as root")
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
		"--include="+strings.Join(img.Packages, ","), Suite, root, Mirror)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	runErr := cmd.Run()
	logFile.Close()
	if runErr != nil {
		return fmt.Errorf("debootstrap %s from %s failed (%v); is the archive reachable from this machine? last lines of its log:\n%s",
			Suite, Mirror, runErr, tail(logPath, 15))
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
	for dest, src := range img.Files {
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
	if err := writeDockerSave(tmp, layerPath, "smol.test/debian:"+Suite, v1.Config{
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd: []string{"bash"},
	}); err != nil {
		return fmt.Errorf("write the Debian image: %w", err)
	}
	return os.Rename(tmp, out)
}

// writeDockerSave writes out as a `docker save` archive of one linux/amd64
// image whose one layer is the tar file at layerPath, stored uncompressed,
// as docker itself stores layers in such archives. (An uncompressed layer
// also spares the box's software CPU a gunzip of the whole root.)
func writeDockerSave(out, layerPath, tag string, cfg v1.Config) error {
	layerFile, err := os.Open(layerPath)
	if err != nil {
		return err
	}
	defer layerFile.Close()
	h := sha256.New()
	size, err := io.Copy(h, layerFile)
	if err != nil {
		return err
	}
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	configJSON, err := json.Marshal(v1.ConfigFile{
		Architecture: "amd64", OS: "linux", Config: cfg,
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(configJSON)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := diffID.Hex + "/layer.tar"
	manifestJSON, err := json.Marshal(tarball.Manifest{{Config: configName, RepoTags: []string{tag}, Layers: []string{layerName}}})
	if err != nil {
		return err
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	member := func(name string, size int64, body io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			return err
		}
		_, err := io.Copy(tw, body)
		return err
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := member(configName, int64(len(configJSON)), bytes.NewReader(configJSON)); err != nil {
		return err
	}
	if err := member(layerName, size, layerFile); err != nil {
		return err
	}
	if err := member("manifest.json", int64(len(manifestJSON)), bytes.NewReader(manifestJSON)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// unmountUnder detaches every mount at or below dir, deepest first, and
// fails if any is left.
func unmountUnder(dir string) error {
	mounts := func() ([]string, error) {
		f, err := os.Open("/proc/self/mounts")
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var under []string
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 2 {
				continue
			}
			// Spaces and the like are octal-escaped; dir has none.
			if mp := fields[1]; mp == dir || strings.HasPrefix(mp, dir+"/") {
				under = append(under, mp)
			}
		}
		return under, s.Err()
	}
	under, err := mounts()
	if err != nil {
		return err
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	for _, mp := range under {
		unix.Unmount(mp, unix.MNT_DETACH)
	}
	if left, err := mounts(); err != nil || len(left) > 0 {
		return fmt.Errorf("mounts left under %s: %v (%v)", dir, left, err)
	}
	return nil
}

// tail returns the last n lines of the file at p.
func tail(p string, n int) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
