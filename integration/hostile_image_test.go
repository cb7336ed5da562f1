package integration

import (
	"archive/tar"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/smolvm/smol/internal/debimage"
	"github.com/smolvm/smol/internal/imagetest"
)

// These tests show, in a booted guest, what the image pipeline promises
// about privileged content: a layer's setuid files, device nodes, file
// capabilities and xattrs reach the guest's root filesystem as the layer
// states them (they never exist on the host: imagefs writes them straight
// into the ext4 image), and a real distribution's root, built by
// debootstrap, pulls and runs.

// netBindServiceCap is a security.capability value (struct vfs_cap_data,
// revision 2, little-endian) granting cap_net_bind_service, permitted and
// effective: what `setcap cap_net_bind_service=ep` writes.
const netBindServiceCap = "\x01\x00\x00\x02" + // magic_etc: VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	"\x00\x04\x00\x00" + "\x00\x00\x00\x00" + // permitted, inheritable: bits 0-31 (CAP_NET_BIND_SERVICE is 10)
	"\x00\x00\x00\x00" + "\x00\x00\x00\x00" // permitted, inheritable: bits 32-63

func TestImageKeepsPrivilegedEntries(t *testing.T) {
	reg := newTestRegistry(t)
	home := t.TempDir()

	rootshell := imagetest.File("bin/rootshell", "#!/bin/sh\nid\n")
	rootshell.Mode = 0o4755
	groupy := imagetest.File("bin/groupy", "#!/bin/sh\nid\n")
	groupy.Mode, groupy.UID, groupy.GID = 0o2711, 1000, 42
	capped := imagetest.File("bin/capped", "#!/bin/sh\nid\n")
	capped.Mode = 0o755
	capped.Xattrs = map[string]string{"security.capability": netBindServiceCap, "user.origin": "smol-test"}
	// The guest mounts its own devtmpfs on /dev, which would hide the
	// image's /dev: the device nodes live in /lab.
	lab := imagetest.Dir("lab/")
	lab.Xattrs = map[string]string{"user.dir": "lab-dir"}
	sda := imagetest.Entry{Name: "lab/sda", Type: tar.TypeBlock, Mode: 0o660, GID: 6, Major: 8, Minor: 0}
	// Major above 255 and minor above 255 need ext4's long device encoding.
	blkext := imagetest.Entry{Name: "lab/blkext", Type: tar.TypeBlock, Mode: 0o660, GID: 6, Major: 259, Minor: 70000}
	tty := imagetest.Entry{Name: "lab/tty9", Type: tar.TypeChar, Mode: 0o620, GID: 5, Major: 4, Minor: 9}
	fifo := imagetest.Entry{Name: "lab/fifo", Type: tar.TypeFifo, Mode: 0o600, UID: 1000, GID: 1000}
	sticky := imagetest.Dir("lab/sticky/")
	sticky.Mode, sticky.UID, sticky.GID = 0o1777, 1000, 1000
	privileged := layer(t, imagetest.Dir("bin/"), imagetest.Symlink("bin/stat", "busybox"), rootshell, groupy, capped, lab, sda, blkext, tty, fifo, sticky)

	// busybox has neither getcap nor getfattr: the host's, with their
	// libraries, go into a layer of their own.
	tools := layer(t, hostPrograms(t, "getcap", "getfattr")...)
	ref := reg.push(t, "test/privileged", image(t, v1.Config{}, busyboxLayer(t), tools, privileged))

	script := "stat -c '%a %u:%g %F %t:%T %n' /bin/rootshell /bin/groupy /lab/sda /lab/blkext /lab/tty9 /lab/fifo /lab/sticky; " +
		"getcap /bin/capped; " +
		"getfattr --only-values -n user.origin /bin/capped; echo; " +
		"getfattr --only-values -n user.dir /lab; echo"
	code, stdout, stderr := smolRun(t, home, nil, "run", "--cpus", "1", "--mem", "256M", "--image", ref, "--", "sh", "-c", script)
	t.Logf("guest output:\n%s", stdout)
	want := "4755 0:0 regular file 0:0 /bin/rootshell\n" +
		"2711 1000:42 regular file 0:0 /bin/groupy\n" +
		"660 0:6 block special file 8:0 /lab/sda\n" +
		"660 0:6 block special file 103:11170 /lab/blkext\n" + // stat prints device numbers in hex
		"620 0:5 character special file 4:9 /lab/tty9\n" +
		"600 1000:1000 fifo 0:0 /lab/fifo\n" +
		"1777 1000:1000 directory 0:0 /lab/sticky\n" +
		"/bin/capped cap_net_bind_service=ep\n" +
		"smol-test\n" +
		"lab-dir\n"
	if code != 0 || stdout != want {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, stdout, want)
	}
}

// hostPrograms returns layer entries holding the named host programs in
// /bin, with the shared libraries and loader they need (as ldd lists them)
// at their host paths, so a busybox image can run them.
func hostPrograms(t *testing.T, names ...string) []imagetest.Entry {
	t.Helper()
	files := map[string]string{} // image path -> host path
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			t.Fatalf("%s is not installed on this host (scripts/install-deps.sh installs it: packages libcap2-bin and attr): %v", n, err)
		}
		files["bin/"+n] = p
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", p, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
			// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				files[strings.TrimPrefix(f[2], "/")] = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				files[strings.TrimPrefix(f[0], "/")] = f[0]
			}
		}
	}
	dirs := map[string]bool{}
	for p := range files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var entries []imagetest.Entry
	for _, d := range sortedKeys(dirs) {
		entries = append(entries, imagetest.Dir(d+"/"))
	}
	for _, p := range sortedKeys(files) {
		data, err := os.ReadFile(files[p])
		if err != nil {
			t.Fatal(err)
		}
		e := imagetest.File(p, string(data))
		e.Mode = 0o755
		entries = append(entries, e)
	}
	return entries
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// pythonImage is a Debian root with python3 (debian_image_test.go).
var pythonImage = &debianImage{
	test: "TestPullDebianImageRunsPython3",
	env:  "SMOL_TEST_DEBIAN_IMAGE",
	image: func() (debimage.Image, error) {
		return debimage.Image{Packages: []string{"python3"}}, nil
	},
}

func init() { pythonImage.prepare() }

func TestPullDebianImageRunsPython3(t *testing.T) {
	tarPath := pythonImage.path(t)
	fi, err := os.Stat(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()

	start := time.Now()
	code, _, stderr := smolRun(t, home, nil, "pull", tarPath)
	if code != 0 {
		t.Fatalf("smol pull %s: exit %d: %s", tarPath, code, stderr)
	}
	t.Logf("smol pull of %s (%d MiB) took %v", filepath.Base(tarPath), fi.Size()>>20, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	code, stdout, stderr := smolRun(t, home, nil, "run", "--cpus", "1", "--mem", "256M", "--image", tarPath, "--", "python3", "-c", "print(1)")
	t.Logf("python3 -c 'print(1)' printed %q (exit %d) in %v", stdout, code, time.Since(start).Round(time.Millisecond))
	if code != 0 || stdout != "1\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want python3 to print 1", code, stdout, stderr)
	}

	// The distribution's own setuid and setgid programs, owners named
	// through its /etc/passwd and /etc/group.
	t.Run("setuid-programs", func(t *testing.T) {
		code, stdout, stderr := smolRun(t, home, nil, "run", "--cpus", "1", "--mem", "256M", "--image", tarPath, "--",
			"stat", "-c", "%a %U:%G %F %n", "/usr/bin/su", "/usr/bin/chage")
		t.Logf("guest output:\n%s", stdout)
		want := "4755 root:root regular file /usr/bin/su\n2755 root:shadow regular file /usr/bin/chage\n"
		if code != 0 || stdout != want {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, stdout, want)
		}
	})
}

// testSelected reports whether this run of the test binary may run the
// top-level test name, from its -test.run, -test.skip and -test.list flags
// read straight from os.Args (init runs before flags are parsed). When in
// doubt it says yes.
func testSelected(name string) bool {
	var run, skip string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		k, v, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		switch k {
		case "test.run", "test.skip":
			if !hasValue && i+1 < len(args) {
				i++
				v = args[i]
			}
			if k == "test.run" {
				run = v
			} else {
				skip = v
			}
		case "test.list":
			return false
		}
	}
	// Only a pattern's first element (before a '/') names top-level tests.
	if skip != "" && !strings.Contains(skip, "/") {
		if re, err := regexp.Compile(skip); err == nil && re.MatchString(name) {
			return false
		}
	}
	if run == "" {
		return true
	}
	first, _, _ := strings.Cut(run, "/")
	re, err := regexp.Compile(first)
	return err != nil || re.MatchString(name)
}
