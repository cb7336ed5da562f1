package main

import (
	"fmt"
	"os"

	"github.com/smolvm/smol/guest/pid1"
	"golang.org/x/sys/unix"
)

// runtimeMounts are what commands expect beyond the kernel filesystems.
var runtimeMounts = []pid1.Mount{
	{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620"},
	{Source: "tmpfs", Target: "/dev/shm", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
	{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
}

// switchRoot makes the image on dev the root filesystem: dev is mounted
// read-only (the image is shared by every run) under an overlay whose upper
// layer is a tmpfs, so the run can write anywhere and the writes vanish
// with the VM — or, with upper, the ext4 disk there, so that they persist
// (a machine's storage). The kernel filesystems are mounted in the new
// root, which then replaces the initramfs as "/".
func switchRoot(dev, upper string) error {
	const lower, rw, newRoot = "/.smol/lower", "/.smol/rw", "/.smol/root"
	for _, d := range []string{lower, rw, newRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(dev, lower, "ext4", unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount root disk %s: %w", dev, err)
	}
	if upper != "" {
		if err := unix.Mount(upper, rw, "ext4", unix.MS_NOATIME, ""); err != nil {
			return fmt.Errorf("mount storage disk %s: %w", upper, err)
		}
	} else if err := unix.Mount("tmpfs", rw, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount writable layer: %w", err)
	}
	for _, d := range []string{rw + "/upper", rw + "/work"} {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + rw + "/upper,workdir=" + rw + "/work"
	if err := unix.Mount("overlay", newRoot, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	if err := pid1.MountAll(newRoot, pid1.KernelMounts); err != nil {
		return err
	}
	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return os.Chdir("/")
}

// linkDevices adds the /dev symlinks that devtmpfs leaves to userspace.
func linkDevices() {
	for link, target := range map[string]string{
		"/dev/ptmx":   "pts/ptmx",
		"/dev/fd":     "/proc/self/fd",
		"/dev/stdin":  "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1",
		"/dev/stderr": "/proc/self/fd/2",
	} {
		if _, err := os.Lstat(link); err == nil {
			if link != "/dev/ptmx" {
				continue
			}
			os.Remove(link) // devtmpfs's ptmx belongs to the initial devpts instance
		}
		os.Symlink(target, link)
	}
}
