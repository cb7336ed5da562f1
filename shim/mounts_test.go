package shim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/smolvm/smol/internal/mountinfo"
)

// mountTestRoot is a container root for mountSpec, and a directory
// outside it, which every mount it makes is detached from at the end.
func mountTestRoot(t *testing.T) (root, outside string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (CI runs as root)")
	}
	dir := t.TempDir()
	root, outside = filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	for _, d := range []string{filepath.Join(root, "etc"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := mountinfo.DetachAllUnder(root); err != nil {
			t.Error(err)
		}
	})
	return root, outside
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSpecMountsStayInTheRoot: an image's symlinks at mount points (to an
// absolute host path, out through "..", a directory pointing at "/") are
// resolved inside the container's root: the host's files they name are
// untouched, and the mounts land where the container sees those paths.
func TestSpecMountsStayInTheRoot(t *testing.T) {
	root, outside := mountTestRoot(t)
	victim := filepath.Join(outside, "victim")
	writeFile(t, victim, "host secret\n")
	if err := os.Symlink(victim, filepath.Join(root, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../"+victim, filepath.Join(root, "etc", "hosts")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(root, "vol")); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "resolv.conf"), "nameserver 10.0.0.10\n")
	writeFile(t, filepath.Join(src, "hosts"), "127.0.0.1 localhost\n")
	data := filepath.Join(src, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(data, "in-volume"), "volume\n")

	made, err := mountSpec(root, []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev/shm", Type: "bind", Source: src, Options: []string{"rbind"}},
		{Destination: "/dev/termination-log", Type: "bind", Source: filepath.Join(src, "hosts"), Options: []string{"rbind"}},
		{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(src, "resolv.conf"), Options: []string{"rbind", "rprivate", "rw"}},
		{Destination: "/etc/hosts", Type: "bind", Source: filepath.Join(src, "hosts"), Options: []string{"rbind", "rprivate", "ro"}},
		{Destination: "/vol/data", Type: "bind", Source: data, Options: []string{"rbind"}},
	}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, victim); got != "host secret\n" {
		t.Errorf("the host file the image's symlinks named now reads %q", got)
	}
	if got := readFile(t, filepath.Join(root, "etc", "resolv.conf")); got != "nameserver 10.0.0.10\n" {
		t.Errorf("/etc/resolv.conf in the root: %q", got)
	}
	if got := readFile(t, filepath.Join(root, "etc", "hosts")); got != "127.0.0.1 localhost\n" {
		t.Errorf("/etc/hosts in the root: %q", got)
	}
	if got := readFile(t, filepath.Join(root, "data", "in-volume")); got != "volume\n" {
		t.Errorf("/vol/data (vol -> /) in the root: %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "dev", "shm")); !os.IsNotExist(err) {
		t.Errorf("/dev/shm, which the guest provides, was made on the host: %v", err)
	}
	if got := readFile(t, filepath.Join(root, "dev", "termination-log")); got != "127.0.0.1 localhost\n" {
		t.Errorf("/dev/termination-log in the root: %q", got)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "hosts"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing the read-only /etc/hosts: %v, want EROFS", err)
	}
	writeFile(t, filepath.Join(root, "etc", "resolv.conf"), "nameserver 10.0.0.11\n")
	if got := readFile(t, filepath.Join(src, "resolv.conf")); got != "nameserver 10.0.0.11\n" {
		t.Errorf("a write to the read-write /etc/resolv.conf reached its source as %q", got)
	}
	if want := []string{"/etc/resolv.conf", "/vol/data"}; !slices.Equal(made.writable, want) {
		t.Errorf("writable mount points %q, want %q", made.writable, want)
	}
	if want := []string{"/dev/termination-log"}; !slices.Equal(made.dev, want) {
		t.Errorf("mount points below /dev %q, want %q", made.dev, want)
	}
}

// TestGuestMountPointsMadeOnTheHost: /proc, /sys and /dev, where the
// guest mounts its own filesystems, are made in the root on the host
// (during the VM's boot, not after it); an image's dangling symlink there
// (to a host path) is replaced, and nothing is made outside the root.
func TestGuestMountPointsMadeOnTheHost(t *testing.T) {
	root, outside := mountTestRoot(t)
	if err := os.Symlink(outside+"/sys", filepath.Join(root, "sys")); err != nil {
		t.Fatal(err)
	}
	if _, err := mountSpec(root, nil, 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("/%s in the root: %v; want a directory", d, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(outside, "sys")); !os.IsNotExist(err) {
		t.Errorf("the image's /sys symlink made %s/sys on the host: %v", outside, err)
	}
}

// TestSpecMountsTmpfs: a tmpfs is made in the root, capped at the given
// size when its options have none, with its own options kept.
func TestSpecMountsTmpfs(t *testing.T) {
	root, _ := mountTestRoot(t)
	if _, err := mountSpec(root, []specs.Mount{
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755"}},
		{Destination: "/tmp/small", Type: "tmpfs", Source: "tmpfs", Options: []string{"size=65536k", "ro"}},
	}, 4<<20); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		size uint64
		ro   bool
	}{{"run", 4 << 20, false}, {"tmp/small", 64 << 20, true}} {
		var st unix.Statfs_t
		if err := unix.Statfs(filepath.Join(root, c.dir), &st); err != nil {
			t.Fatal(err)
		}
		if st.Type != unix.TMPFS_MAGIC || st.Blocks*uint64(st.Bsize) != c.size || (st.Flags&unix.ST_RDONLY != 0) != c.ro {
			t.Errorf("/%s: type %#x, %d bytes, flags %#x; want a tmpfs of %d bytes, read-only %v", c.dir, st.Type, st.Blocks*uint64(st.Bsize), st.Flags, c.size, c.ro)
		}
	}
}

// TestSpecMountsRefused: what cannot be honoured is refused with a reason,
// not skipped.
func TestSpecMountsRefused(t *testing.T) {
	root, _ := mountTestRoot(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "file"), "x")
	writeFile(t, filepath.Join(root, "etc", "plain"), "x")
	for _, c := range []struct {
		name string
		m    specs.Mount
		want error
	}{
		{"relative destination", specs.Mount{Destination: "etc/x", Type: "bind", Source: src, Options: []string{"rbind"}}, errdefs.ErrInvalidArgument},
		{"on the root", specs.Mount{Destination: "/", Type: "bind", Source: src, Options: []string{"rbind"}}, errdefs.ErrInvalidArgument},
		{"unknown type", specs.Mount{Destination: "/mnt", Type: "nfs", Source: "server:/x"}, errdefs.ErrNotImplemented},
		{"unknown option", specs.Mount{Destination: "/mnt", Type: "bind", Source: src, Options: []string{"rbind", "frobnicate"}}, errdefs.ErrNotImplemented},
		{"directory on a file", specs.Mount{Destination: "/etc/plain", Type: "bind", Source: src, Options: []string{"rbind"}}, errdefs.ErrInvalidArgument},
		{"file on a directory", specs.Mount{Destination: "/etc", Type: "bind", Source: filepath.Join(src, "file"), Options: []string{"bind"}}, errdefs.ErrInvalidArgument},
		{"missing source", specs.Mount{Destination: "/mnt", Type: "bind", Source: filepath.Join(src, "absent"), Options: []string{"rbind"}}, os.ErrNotExist},
	} {
		if _, err := mountSpec(root, []specs.Mount{c.m}, 1<<20); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestDetachAllUnder: every mount below a directory, nested and with an
// escaped name, is detached, and the volume behind it is then out of
// reach of a removal of the tree.
func TestDetachAllUnder(t *testing.T) {
	root, outside := mountTestRoot(t)
	writeFile(t, filepath.Join(outside, "keep"), "user data\n")
	if _, err := mountSpec(root, []specs.Mount{
		{Destination: "/vol with space", Type: "bind", Source: outside, Options: []string{"rbind"}},
		{Destination: "/vol with space/inner", Type: "tmpfs", Source: "tmpfs"},
	}, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := mountinfo.DetachAllUnder(root); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(outside, "keep")); got != "user data\n" {
		t.Errorf("the volume's file after the tree's removal: %q", got)
	}
}
