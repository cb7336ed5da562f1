package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// shareOptions mount a host directory: 9P2000.L over virtio, messages of
// up to 512 KiB (the device takes up to 1 MiB), and the page cache used
// only for mmap, so that what the host changes is seen at once.
const shareOptions = "trans=virtio,version=9p2000.L,msize=524288,cache=mmap"

// share is one host directory to mount: TAG:PATH[:ro][:suid].
type share struct {
	tag, path string
	flags     uintptr
}

// parseShares reads smol.shares. Device nodes in a share mean nothing
// in the guest (nodev), nor do setuid bits unless the share says suid
// (a container's root): the directory is the host user's.
func parseShares(spec string) ([]share, error) {
	if spec == "" {
		return nil, nil
	}
	var shares []share
	for _, item := range strings.Split(spec, ",") {
		parts := strings.Split(item, ":")
		if len(parts) < 2 || len(parts) > 4 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") {
			return nil, fmt.Errorf("smol.shares: %q: want TAG:PATH[:ro][:suid]", item)
		}
		s := share{tag: parts[0], path: parts[1], flags: unix.MS_NOSUID | unix.MS_NODEV}
		for _, opt := range parts[2:] {
			switch opt {
			case "ro":
				s.flags |= unix.MS_RDONLY
			case "suid":
				s.flags &^= unix.MS_NOSUID
			default:
				return nil, fmt.Errorf("smol.shares: %q: unknown option %q", item, opt)
			}
		}
		shares = append(shares, s)
	}
	return shares, nil
}

// mountShares mounts each share of spec (smol.shares) at its path, made
// if missing.
func mountShares(spec string) error {
	shares, err := parseShares(spec)
	if err != nil {
		return err
	}
	for _, s := range shares {
		if err := os.MkdirAll(s.path, 0o755); err != nil {
			return fmt.Errorf("shared directory %s: %w", s.path, err)
		}
		if err := unix.Mount(s.tag, s.path, "9p", s.flags, shareOptions); err != nil {
			return fmt.Errorf("mount shared directory %s (%s): %w", s.path, s.tag, err)
		}
	}
	return nil
}
