package memory

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NewPrivate maps size bytes of f from offset privately as guest RAM: the
// guest reads the file's pages as it touches them (a restore runs before
// its memory is read) and its writes stay its own, never reaching the
// file. The file region must hold size bytes; a shorter file would turn a
// guest access into SIGBUS, so it is checked first.
func NewPrivate(f *os.File, offset int64, size uint64) (*Guest, error) {
	if size == 0 || size%PageSize != 0 || offset < 0 || offset%PageSize != 0 {
		return nil, fmt.Errorf("private guest memory of %d bytes at offset %d: not page-aligned", size, offset)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() < offset || uint64(fi.Size()-offset) < size {
		return nil, fmt.Errorf("%s holds %d bytes from offset %d, the guest needs %d", f.Name(), fi.Size()-offset, offset, size)
	}
	m, err := unix.Mmap(int(f.Fd()), offset, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of %s privately: %w", size, f.Name(), err)
	}
	// Kept for a later freeze, which reads the unchanged pages from it.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Munmap(m)
		return nil, err
	}
	return &Guest{fd: fd, fdOff: offset, mapping: m, regions: Layout(size), private: true}, nil
}

// discardPrivate replaces [off, off+length) of a private mapping with
// fresh anonymous zero pages. madvise(MADV_DONTNEED) would not do: on a
// private file mapping it reverts pages to the file's contents, and a
// discarded page must read as zeros.
func (g *Guest) discardPrivate(off, length uint64) error {
	addr := uintptr(unsafe.Pointer(&g.mapping[off]))
	_, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(length), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE, ^uintptr(0), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
