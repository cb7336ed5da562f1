package shim

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/containerd/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol/internal/inroot"
	"golang.org/x/sys/unix"
)

// A container's OCI mounts (its spec's "mounts": under CRI the pod's
// /etc/hosts, /etc/resolv.conf and /etc/hostname, and the pod's volumes)
// are made on the host, inside the container's root there, before the
// machine's share serves it: the guest then sees them as part of the
// root (9P crosses the host's mount points), with no guest-side
// mechanism and no extra share per volume.
//
// The mount points are named by the image, which is hostile: an image's
// /etc/resolv.conf may be a symlink to /etc/shadow, meant for the host.
// So each target is resolved inside the root only (openat2
// RESOLVE_IN_ROOT, which resolves a symlink the way the container would
// see it, never outside), held as a descriptor, and the mount is attached
// to that descriptor (open_tree/move_mount), with its read-only and other
// attributes set before it is attached: no path is looked up twice, so
// nothing the guest changes in the meantime can move a mount or leave one
// writable.
//
// /proc, /sys and /dev are the guest's own: the agent mounts its kernel
// filesystems in every container root, and a /dev of the container's own
// with the guest's /dev/pts and the pod's shared /dev/shm (as the pod's
// containers share IPC) bound in. So the spec's entries for those, and
// for everything under /proc and /sys, are left to it. Other mounts below
// /dev (a volume there, kubelet's /dev/termination-log) are made on the
// host like the rest, and the agent carries them into the container's
// /dev, which covers them. Their mount points, though, are made here, as
// runc makes them in the rootfs: a directory made in the guest costs a
// handful of 9P round trips, paid after the VM has booted, while the
// container waits; made here, they are paid during the boot.

// guestMountPoints are where the guest mounts its own filesystems in
// every container root (guest/agent's prepareRoot).
var guestMountPoints = []string{"/proc", "/sys", "/dev"}

// guestProvided says whether the guest makes the mount at dest itself.
func guestProvided(dest string) bool {
	switch dest {
	case "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue":
		return true
	}
	for _, p := range []string{"/proc", "/sys"} {
		if dest == p || strings.HasPrefix(dest, p+"/") {
			return true
		}
	}
	return false
}

// madeMounts are the mount points mountSpec made, as the container sees
// them.
type madeMounts struct {
	writable []string // not below /dev, and not read-only: they stay writable in a read-only root
	dev      []string // below /dev: the guest carries them into the container's /dev
}

// underDev says whether dest is below /dev.
func underDev(dest string) bool { return strings.HasPrefix(dest, "/dev/") }

// mountSpec makes the container's spec mounts inside root (the container's
// root on the host). maxTmpfs bounds a tmpfs without a size (the host's
// memory is not the guest's to fill).
func mountSpec(root string, mounts []specs.Mount, maxTmpfs uint64) (made madeMounts, err error) {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return made, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFD)
	for _, d := range guestMountPoints {
		fd, err := inroot.MountPoint(rootFD, d, true)
		if err != nil {
			return made, fmt.Errorf("mount point %s: %w", d, err)
		}
		unix.Close(fd)
	}
	for _, m := range mounts {
		if !path.IsAbs(m.Destination) {
			return made, fmt.Errorf("mount %q: %w: the destination is not absolute", m.Destination, errdefs.ErrInvalidArgument)
		}
		dest := path.Clean(m.Destination)
		if guestProvided(dest) {
			continue
		}
		if dest == "/" {
			return made, fmt.Errorf("mount on /: %w: the root is the container's rootfs", errdefs.ErrInvalidArgument)
		}
		opts, err := parseMountOptions(m.Options)
		if err != nil {
			return made, fmt.Errorf("mount %s: %w", dest, err)
		}
		switch {
		case m.Type == "bind" || opts.bind:
			err = bindInRoot(rootFD, dest, m.Source, opts)
		case m.Type == "tmpfs":
			err = tmpfsInRoot(rootFD, dest, opts, maxTmpfs)
		default:
			err = fmt.Errorf("%w: a mount of type %q (bind mounts and tmpfs are made; /proc, /sys and /dev are the guest's)", errdefs.ErrNotImplemented, m.Type)
		}
		if err != nil {
			return made, fmt.Errorf("mount %s: %w", dest, err)
		}
		switch {
		case underDev(dest):
			made.dev = append(made.dev, dest)
		case opts.attr&unix.MOUNT_ATTR_RDONLY == 0:
			made.writable = append(made.writable, dest)
		}
	}
	return made, nil
}

// mountOptions are a spec mount's options, sorted by what they do.
type mountOptions struct {
	bind, recursive bool
	attr            uint64   // MOUNT_ATTR_* to set
	data            []string // a tmpfs's own options (size=, mode=, …)
}

// parseMountOptions sorts OCI mount options. Propagation options are
// accepted and have no effect: the mounts are private to the shim and
// invisible to the guest as mounts.
func parseMountOptions(options []string) (mountOptions, error) {
	attrs := map[string]uint64{"ro": unix.MOUNT_ATTR_RDONLY, "nosuid": unix.MOUNT_ATTR_NOSUID,
		"nodev": unix.MOUNT_ATTR_NODEV, "noexec": unix.MOUNT_ATTR_NOEXEC, "noatime": unix.MOUNT_ATTR_NOATIME,
		"strictatime": unix.MOUNT_ATTR_STRICTATIME, "nodiratime": unix.MOUNT_ATTR_NODIRATIME}
	noEffect := map[string]bool{"rw": true, "suid": true, "dev": true, "exec": true, "relatime": true, "defaults": true,
		"private": true, "rprivate": true, "shared": true, "rshared": true, "slave": true, "rslave": true,
		"unbindable": true, "runbindable": true}
	var o mountOptions
	for _, opt := range options {
		switch {
		case opt == "bind":
			o.bind = true
		case opt == "rbind":
			o.bind, o.recursive = true, true
		case attrs[opt] != 0:
			o.attr |= attrs[opt]
		case noEffect[opt]:
		case strings.ContainsRune(opt, '='):
			o.data = append(o.data, opt)
		default:
			return o, fmt.Errorf("%w: mount option %q", errdefs.ErrNotImplemented, opt)
		}
	}
	return o, nil
}

// bindInRoot binds the host's source onto dest inside the root.
func bindInRoot(rootFD int, dest, source string, o mountOptions) error {
	if len(o.data) > 0 {
		return fmt.Errorf("%w: options %q on a bind mount", errdefs.ErrInvalidArgument, o.data)
	}
	var st unix.Stat_t
	if err := unix.Stat(source, &st); err != nil {
		return &os.PathError{Op: "stat", Path: source, Err: err}
	}
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if o.recursive {
		flags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, source, flags)
	if err != nil {
		return &os.PathError{Op: "open_tree", Path: source, Err: err}
	}
	defer unix.Close(tree)
	if o.attr != 0 {
		setFlags := uint(0)
		if o.recursive {
			setFlags = unix.AT_RECURSIVE
		}
		set := &unix.MountAttr{Attr_set: o.attr}
		if o.attr&unix.MOUNT_ATTR__ATIME != 0 {
			set.Attr_clr = unix.MOUNT_ATTR__ATIME // the kernel's rule for changing the atime mode
		}
		if err := unix.MountSetattr(tree, "", setFlags|unix.AT_EMPTY_PATH, set); err != nil {
			return fmt.Errorf("set the mount's attributes: %w", err)
		}
	}
	return attachInRoot(rootFD, dest, st.Mode&unix.S_IFMT == unix.S_IFDIR, tree)
}

// tmpfsInRoot mounts a new tmpfs on dest inside the root, at most max
// bytes unless its options give a size.
func tmpfsInRoot(rootFD int, dest string, o mountOptions, max uint64) error {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	sized := false
	for _, d := range o.data {
		k, v, _ := strings.Cut(d, "=")
		sized = sized || k == "size"
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return fmt.Errorf("%w: tmpfs option %q: %v", errdefs.ErrInvalidArgument, d, err)
		}
	}
	if !sized {
		if err := unix.FsconfigSetString(fs, "size", strconv.FormatUint(max, 10)); err != nil {
			return fmt.Errorf("tmpfs size: %w", err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("create the tmpfs: %w", err)
	}
	tree, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, int(o.attr))
	if err != nil {
		return fmt.Errorf("fsmount tmpfs: %w", err)
	}
	defer unix.Close(tree)
	return attachInRoot(rootFD, dest, true, tree)
}

// attachInRoot attaches the detached mount tree onto dest inside the root,
// made first (a directory, or an empty file for a mount of a file) if it
// is missing.
func attachInRoot(rootFD int, dest string, dir bool, tree int) error {
	target, err := inroot.MountPoint(rootFD, dest, dir)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return err
	}
	if isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDir != dir {
		return fmt.Errorf("%w: the mount point's type (directory: %v) is not its source's", errdefs.ErrInvalidArgument, isDir)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}
