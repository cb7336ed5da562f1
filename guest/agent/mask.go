package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/smolvm/smol/internal/inroot"
	"golang.org/x/sys/unix"
)

// A container's masked and read-only paths (the OCI spec's
// linux.maskedPaths and linux.readonlyPaths: CRI's defaults hide
// /proc/kcore, /proc/keys, /sys/firmware and the like, and make
// /proc/sys, /proc/sysrq-trigger and others read-only) are applied in its
// root once its kernel filesystems are mounted: by prepareRoot, those
// below /proc by the launcher instead when it mounts a PID namespace's
// own /proc over the root's. A masked file reads as empty
// (the null device bound on it), a masked directory as an empty
// read-only tmpfs; a read-only path is bound onto itself and remounted
// read-only, keeping its other flags. A path the root lacks is skipped,
// as runc does: the defaults name files only some kernels have.

// maskPaths applies masked and read-only paths in the root rootFD is.
func maskPaths(rootFD int, masked, readOnly []string) error {
	for _, p := range masked {
		fd, err := inroot.Open(rootFD, p, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = unix.Mount("tmpfs", fdPath(fd), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
			} else {
				err = unix.Mount("/dev/null", fdPath(fd), "", unix.MS_BIND, "")
			}
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	for _, p := range readOnly {
		if err := remountReadOnly(rootFD, p); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

// remountReadOnly makes path p in the root a read-only mount of itself.
func remountReadOnly(rootFD int, p string) error {
	fd, err := inroot.Open(rootFD, p, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	err = unix.Mount(fdPath(fd), fdPath(fd), "", unix.MS_BIND|unix.MS_REC, "")
	unix.Close(fd)
	if err != nil {
		return err
	}
	// The descriptor held the mount below; the bind is on top now.
	if fd, err = inroot.Open(rootFD, p, 0); err != nil {
		return err
	}
	defer unix.Close(fd)
	return remountBindReadOnly(fdPath(fd))
}

// remountBindReadOnly makes the bind mount at path read-only, keeping
// the flags it has (nosuid, nodev, noexec, atime): a remount sets all
// of them anew, and one left out would be cleared.
func remountBindReadOnly(path string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return err
	}
	// statfs's ST_ flags have the values of the mount flags they report.
	kept := uintptr(fs.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	return unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|kept, "")
}

// underProc keeps the paths below /proc, outsideProc the others.
func underProc(paths []string) []string   { return procPaths(paths, true) }
func outsideProc(paths []string) []string { return procPaths(paths, false) }

func procPaths(paths []string, under bool) []string {
	var out []string
	for _, p := range paths {
		if (p == "/proc" || strings.HasPrefix(p, "/proc/")) == under {
			out = append(out, p)
		}
	}
	return out
}
