package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// shareOptions mount a host directory: 9P2000.L over virtio, messages of
// up to 512 KiB (the device takes up to 1 MiB), and the page cache used
// only for mmap, so that what the host changes is seen at once.
const shareOptions = "trans=virtio,version=9p2000.L,msize=524288,cache=mmap"

// mountShares mounts each TAG:PATH[:ro] of spec (smol.shares) at PATH,
// made if missing. Device nodes and setuid bits in a share mean nothing
// in the guest (nodev, nosuid): the directory is the host user's.
func mountShares(spec string) error {
	if spec == "" {
		return nil
	}
	for _, item := range strings.Split(spec, ",") {
		parts := strings.Split(item, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") {
			return fmt.Errorf("smol.shares: %q: want TAG:PATH[:ro]", item)
		}
		tag, path := parts[0], parts[1]
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
		if len(parts) == 3 && parts[2] == "ro" {
			flags |= unix.MS_RDONLY
		}
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("shared directory %s: %w", path, err)
		}
		if err := unix.Mount(tag, path, "9p", flags, shareOptions); err != nil {
			return fmt.Errorf("mount shared directory %s (%s): %w", path, tag, err)
		}
	}
	return nil
}

// preparedRoots are the command roots whose kernel filesystems are
// mounted.
var preparedRoots = struct {
	sync.Mutex
	done map[string]bool
}{done: map[string]bool{}}

// prepareRoot mounts /proc, /sys and /dev (the guest's, bound) inside
// root, once, for commands that run chrooted there (a container's root
// shared from the host): what programs expect of a root. A read-only root
// is root bound onto itself read-only first (the container's own view:
// the share stays writable for the others), with the kernel filesystems
// mounted on that; its writable paths (the container's volumes, which the
// host mounted inside the root, so they are one filesystem with it here)
// are each bound onto themselves before, mounts of their own that the
// recursive bind carries and the read-only remount, which is not
// recursive, leaves writable.
func prepareRoot(root string, readOnly bool, writable []string) error {
	preparedRoots.Lock()
	defer preparedRoots.Unlock()
	if preparedRoots.done[root] {
		return nil
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return fmt.Errorf("root %s is not a directory", root)
	}
	kernelFS := []struct {
		target, fstype, source string
		flags                  uintptr
	}{
		{"proc", "proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sys", "sysfs", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY},
		{"dev", "", "/dev", unix.MS_BIND | unix.MS_REC},
	}
	for _, m := range kernelFS {
		if err := os.MkdirAll(filepath.Join(root, m.target), 0o755); err != nil {
			return fmt.Errorf("root %s: %w", root, err)
		}
	}
	if readOnly {
		for _, w := range writable {
			if err := bindInRoot(root, w); err != nil {
				return fmt.Errorf("root %s: keep %s writable: %w", root, w, err)
			}
		}
		if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("root %s: bind it: %w", root, err)
		}
		if err := unix.Mount("", root, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("root %s: make it read-only: %w", root, err)
		}
	}
	for _, m := range kernelFS {
		dir := filepath.Join(root, m.target)
		if err := unix.Mount(m.source, dir, m.fstype, m.flags, ""); err != nil {
			return fmt.Errorf("root %s: mount %s: %w", root, m.target, err)
		}
	}
	preparedRoots.done[root] = true
	return nil
}

// bindInRoot binds the path p inside root onto itself, p resolved as in
// a chroot there (a symlink in the container's root never points the
// mount elsewhere in the guest).
func bindInRoot(root, p string) error {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	return unix.Mount(self, self, "", unix.MS_BIND, "")
}
