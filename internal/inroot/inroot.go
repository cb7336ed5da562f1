// Package inroot opens and makes paths inside a directory that is
// someone else's root (a container's), resolving them as a chroot there
// would: the root's symlinks and ".." never lead out of it. The shim uses
// it on the host, where the root comes from a hostile image, and the
// guest agent inside the VM, where another container of the pod may
// have planted the symlinks.
package inroot

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Open opens name (relative to the root) inside the root: symlinks and
// ".." resolved as in a chroot there, never leaving it. The descriptor is
// O_PATH: it names the file, it does not read it.
func Open(rootFD int, name string, flags uint64) (int, error) {
	return OpenFile(rootFD, name, flags|unix.O_PATH)
}

// OpenFile is Open for a descriptor that reads or writes (flags as for
// openat2, O_CLOEXEC added). A caller opening a file of a hostile root
// adds O_NONBLOCK (a FIFO there must not hang it) and checks what it got.
func OpenFile(rootFD int, name string, flags uint64) (int, error) {
	for {
		fd, err := unix.Openat2(rootFD, name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// MountPoint opens dest inside the root as an O_PATH descriptor, making
// each missing directory on the way and, last, dest itself: a directory
// if dir, else an empty file. A dangling symlink in the way is replaced
// by what is made (an image's /etc/resolv.conf may point at a file the
// image lacks); a symlink to something that exists is followed, inside
// the root.
func MountPoint(rootFD int, dest string, dir bool) (int, error) {
	names := strings.Split(strings.TrimPrefix(dest, "/"), "/")
	parent := "."
	for i, name := range names {
		last := i == len(names)-1
		p := path.Join(parent, name)
		fd, err := Open(rootFD, p, 0)
		if errors.Is(err, unix.ENOENT) {
			if err := makeIn(rootFD, parent, name, dir || !last); err != nil {
				return -1, fmt.Errorf("make %s: %w", "/"+p, err)
			}
			fd, err = Open(rootFD, p, 0)
		}
		if err != nil {
			return -1, fmt.Errorf("open %s in the container's root: %w", "/"+p, err)
		}
		if last {
			return fd, nil
		}
		unix.Close(fd)
		parent = p
	}
	return -1, errors.New("no mount point") // unreachable: names is never empty
}

// makeIn makes name, a directory or an empty file, in the directory
// parent (inside the root), replacing a dangling symlink there.
func makeIn(rootFD int, parent, name string, dir bool) error {
	pfd, err := Open(rootFD, parent, unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if err := unix.Unlinkat(pfd, name, 0); err != nil {
			return err
		}
	}
	if dir {
		err := unix.Mkdirat(pfd, name, 0o755)
		if errors.Is(err, unix.EEXIST) {
			return nil // made meanwhile
		}
		return err
	}
	fd, err := unix.Openat(pfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return err
	}
	return unix.Close(fd)
}
