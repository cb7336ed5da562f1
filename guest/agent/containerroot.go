package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/smolvm/smol/agent"
	"github.com/smolvm/smol/internal/inroot"
	"golang.org/x/sys/unix"
)

// A container's root (shared from the host, the containerd shim's) gets,
// once, before its first command: /proc and /sys (the guest's kernel
// filesystems) and a /dev of its own, as OCI runtimes give: a small tmpfs
// with the standard device nodes, the guest's /dev/pts bound in (the
// agent opens commands' terminals there) and its /dev/shm (one for the
// pod, whose containers share IPC). Nothing a container makes in /dev
// reaches the guest's or another container's.
//
// The host may have mounted things below the root's /dev (a volume there,
// kubelet's /dev/termination-log): those are held open before the new
// /dev covers them and bound into it. A read-only root is root bound onto
// itself read-only (the container's own view: the share stays writable
// for the others), its writable paths (volumes the host mounted inside
// it, one filesystem with it here) each bound onto themselves first:
// mounts of their own, which the recursive bind carries and the read-only
// remount, which is not recursive, leaves writable. Every path is
// resolved inside the root (package inroot): another container of the
// pod may have planted symlinks in it.

// preparedRoots are the command roots prepared, each prepared once: a
// pod's roots side by side (its sandbox's and its first container's
// arrive together once the VM has booted, and each takes tens of 9P round
// trips), two commands of one root waiting for its one preparation.
var preparedRoots onceEach

// onceEach runs a function once per key, calls for different keys side
// by side; a call that failed is tried again by the key's next one.
type onceEach struct {
	mu   sync.Mutex
	keys map[string]*onceEntry
}

type onceEntry struct {
	sync.Mutex
	done bool
}

// Do runs f unless a call for key has succeeded, waiting meanwhile for a
// call for key in progress.
func (o *onceEach) Do(key string, f func() error) error {
	o.mu.Lock()
	if o.keys == nil {
		o.keys = map[string]*onceEntry{}
	}
	e := o.keys[key]
	if e == nil {
		e = &onceEntry{}
		o.keys[key] = e
	}
	o.mu.Unlock()
	e.Lock()
	defer e.Unlock()
	if e.done {
		return nil
	}
	if err := f(); err != nil {
		return err
	}
	e.done = true
	return nil
}

// devNodes are the device nodes of a container's /dev.
var devNodes = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

// devLinks are the symlinks of a container's /dev.
var devLinks = [][2]string{{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}}

// prepareRoot readies root for commands chrooted in it (above).
func prepareRoot(root string, start agent.Start) error {
	return preparedRoots.Do(root, func() error {
		if err := prepareRootOnce(root, start); err != nil {
			return fmt.Errorf("root %s: %w", root, err)
		}
		return nil
	})
}

func prepareRootOnce(root string, start agent.Start) error {
	readOnly, writable, devMounts := start.ReadOnlyRoot, start.WritablePaths, start.DevMounts
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("not a directory: %w", err)
	}
	// A closure: a read-only root is opened again below, and the deferred
	// close must take the descriptor held then. Closing the first one's
	// number twice closed whatever another goroutine had opened in
	// between (a container's PID namespace: its join then failed with
	// EINVAL).
	defer func() { unix.Close(rootFD) }()
	// The host's mounts below /dev, held from the writable share before
	// anything covers them.
	carried := make([]int, len(devMounts))
	defer func() {
		for _, fd := range carried {
			if fd > 0 {
				unix.Close(fd)
			}
		}
	}()
	for i, p := range devMounts {
		if carried[i], err = inroot.Open(rootFD, p, 0); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if readOnly {
		// The mount points first, while the root is writable (below,
		// mountAt makes any that are missing; the shim has made them).
		for _, d := range []string{"proc", "sys", "dev"} {
			fd, err := inroot.MountPoint(rootFD, d, true)
			if err != nil {
				return err
			}
			unix.Close(fd)
		}
		for _, w := range writable {
			fd, err := inroot.Open(rootFD, w, 0)
			if err != nil {
				return fmt.Errorf("keep %s writable: %w", w, err)
			}
			err = unix.Mount(fdPath(fd), fdPath(fd), "", unix.MS_BIND, "")
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("keep %s writable: %w", w, err)
			}
		}
		if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind it: %w", err)
		}
		// nodev and (unless the share allows setuid files) nosuid come
		// from the share the root is on.
		if err := remountBindReadOnly(root); err != nil {
			return fmt.Errorf("make it read-only: %w", err)
		}
		// The read-only view is a new mount on root's path.
		view, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		unix.Close(rootFD)
		rootFD = view
	}
	mounts := []struct {
		target, fstype, source string
		flags                  uintptr
		data                   string
	}{
		{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sys", "sysfs", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY, ""},
		{"dev", "tmpfs", "tmpfs", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=755,size=65536k"},
	}
	for _, m := range mounts {
		if err := mountAt(rootFD, m.target, true, m.source, m.fstype, m.flags, m.data); err != nil {
			return err
		}
	}
	if err := populateDev(rootFD, devMounts, carried); err != nil {
		return err
	}
	masked, readOnlyPaths := start.MaskedPaths, start.ReadOnlyPaths
	if start.PIDNamespace != "" {
		// The launcher covers this /proc with the namespace's and masks
		// that one (every command in a root has the same namespace).
		masked, readOnlyPaths = outsideProc(masked), outsideProc(readOnlyPaths)
	}
	return maskPaths(rootFD, masked, readOnlyPaths)
}

// populateDev fills the container's new /dev (above).
func populateDev(rootFD int, devMounts []string, carried []int) error {
	dev, err := inroot.Open(rootFD, "dev", unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	for _, n := range devNodes {
		if err := unix.Mknodat(dev, n.name, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("/dev/%s: %w", n.name, err)
		}
	}
	for _, l := range devLinks {
		if err := unix.Symlinkat(l[1], dev, l[0]); err != nil {
			return fmt.Errorf("/dev/%s: %w", l[0], err)
		}
	}
	for _, shared := range []string{"pts", "shm"} {
		if err := mountAt(rootFD, "dev/"+shared, true, "/dev/"+shared, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for i, p := range devMounts {
		var st unix.Stat_t
		if err := unix.Fstat(carried[i], &st); err != nil {
			return err
		}
		if err := mountAt(rootFD, p, st.Mode&unix.S_IFMT == unix.S_IFDIR, fdPath(carried[i]), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
	}
	return nil
}

// mountAt mounts source on the path p inside the root, made first (a
// directory, or an empty file when !dir) if it is missing.
func mountAt(rootFD int, p string, dir bool, source, fstype string, flags uintptr, data string) error {
	fd, err := inroot.MountPoint(rootFD, p, dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Mount(source, fdPath(fd), fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s: %w", filepath.Join("/", p), err)
	}
	return nil
}

// fdPath names a descriptor for calls that take a path: the kernel
// resolves it to the file the descriptor holds.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
