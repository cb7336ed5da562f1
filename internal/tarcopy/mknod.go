package tarcopy

import (
	"archive/tar"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// mknod creates a device node or FIFO. Only the guest agent gets here
// (Unpack refuses nodes from a hostile stream), unpacking what the host
// user sent: the path is joined, not confined, and os.Root has no mknod.
func mknod(p string, h *tar.Header, mode fs.FileMode) error {
	typ := uint32(unix.S_IFIFO)
	switch h.Typeflag {
	case tar.TypeChar:
		typ = unix.S_IFCHR
	case tar.TypeBlock:
		typ = unix.S_IFBLK
	}
	unix.Unlink(p)
	return unix.Mknod(p, typ|uint32(mode.Perm()), int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))))
}

// setPipeSize enlarges a pipe's buffer; a refusal (above the system's
// pipe-max-size) keeps the default.
func setPipeSize(f *os.File, size int) {
	unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, size)
}
