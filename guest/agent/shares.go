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
