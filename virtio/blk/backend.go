package blk

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SectorSize is the unit of virtio-blk addressing: capacity, request sectors
// and discard ranges all count 512-byte sectors, whatever the host's block
// size.
const SectorSize = 512

// ErrDiskInUse says another VM (another open file description, even in this
// process) holds a conflicting lock on the image: a writer excludes everyone
// else, readers exclude writers. Test for it with errors.Is.
var ErrDiskInUse = errors.New("disk is already in use by another VM")

// InUseError is the error Open returns when the image is locked by someone
// else; it names the image and matches ErrDiskInUse.
type InUseError struct {
	Path     string
	ReadOnly bool // how this Open asked for the image
}

func (e *InUseError) Error() string {
	return "disk " + e.Path + " is already in use by another VM"
}

// Is makes errors.Is(err, ErrDiskInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrDiskInUse }

// diskError is an Open failure phrased for a person ("disk /x: no such
// file") that still unwraps to the underlying cause (fs.ErrNotExist, ...).
type diskError struct {
	path, msg string
	err       error
}

func (e *diskError) Error() string { return "disk " + e.path + ": " + e.msg }
func (e *diskError) Unwrap() error { return e.err }

// Disk is a raw disk image (a regular file or a block device) opened and
// locked for one VM. Its capacity is the file size rounded down to whole
// sectors: a trailing partial sector is never exposed to the guest and never
// written.
//
// A Disk is safe for use from several goroutines (every operation is one or
// a few positioned system calls), but in smol only the device's worker does
// I/O on it. Close waits for system calls already running on the file.
type Disk struct {
	file     *os.File
	raw      syscall.RawConn
	path     string
	readOnly bool
	sectors  uint64
	serial   string
	blockDev bool
	cow      *overlay // a copy-on-write layer (overlay.go); nil for a raw image
}

// Open opens the image at path and takes an advisory lock on it (flock):
// exclusive for read-write, shared for read-only, so two VMs never write one
// disk and nobody reads a disk another VM is writing. A conflicting lock
// fails at once with an *InUseError (errors.Is(err, ErrDiskInUse)).
func Open(path string, readOnly bool) (*Disk, error) {
	return open(path, readOnly, true, 0)
}

// OpenView opens the disk at path read-only without taking its lock: a
// view for copying a disk whose VM is paused and has flushed it (a pack
// of a running machine), or is stopped. A layer's view reads through its
// bases.
func OpenView(path string) (*Disk, error) { return open(path, true, false, 0) }

// open opens the image at path, a layer depth layers above the disk's
// top.
func open(path string, readOnly, lock bool, depth int) (*Disk, error) {
	// Stat before open: opening a FIFO would block and opening a
	// directory read-write fails with a less helpful message.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, describeOpenError(path, err)
	}
	if err := checkKind(path, fi); err != nil {
		return nil, err
	}

	flags := os.O_RDWR
	if readOnly {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flags|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, describeOpenError(path, err)
	}
	d, err := newDisk(f, path, readOnly, lock)
	if err != nil {
		f.Close()
		return nil, err
	}
	if strings.HasSuffix(path, OverlaySuffix) && !d.blockDev {
		cow, size, err := openOverlay(f, path, readOnly, lock, depth)
		if err != nil {
			f.Close()
			return nil, &diskError{path, err.Error(), err}
		}
		d.cow, d.sectors = cow, uint64(size)/SectorSize
	}
	return d, nil
}

func newDisk(f *os.File, path string, readOnly, lock bool) (*Disk, error) {
	// The path may have been replaced between Stat and open: check what
	// was really opened.
	fi, err := f.Stat()
	if err != nil {
		return nil, &diskError{path, "stat: " + err.Error(), err}
	}
	if err := checkKind(path, fi); err != nil {
		return nil, err
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, &diskError{path, err.Error(), err}
	}
	d := &Disk{file: f, raw: raw, path: path, readOnly: readOnly,
		blockDev: fi.Mode()&fs.ModeDevice != 0}

	if lock {
		if err := d.lock(); err != nil {
			return nil, err
		}
	}
	// Seek gives the size of block devices too (their Stat size is 0).
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, &diskError{path, "size: " + err.Error(), err}
	}
	if size < SectorSize {
		return nil, &diskError{path, fmt.Sprintf("too small (%d bytes): a disk needs at least one %d-byte sector", size, SectorSize), nil}
	}
	d.sectors = uint64(size) / SectorSize
	d.serial = serialFor(fi)
	return d, nil
}

// checkKind accepts regular files and block devices, the two things a raw
// image can be.
func checkKind(path string, fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m.IsDir():
		return &diskError{path, "is a directory", syscall.EISDIR}
	case m.IsRegular():
		return nil
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return nil
	default:
		return &diskError{path, "not a regular file or block device", nil}
	}
}

func describeOpenError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &diskError{path, "no such file", err}
	case errors.Is(err, syscall.EISDIR):
		return &diskError{path, "is a directory", err}
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return &diskError{path, "permission denied (attach it read-only, or fix its permissions)", err}
	default:
		return &diskError{path, err.Error(), err}
	}
}

func (d *Disk) lock() error {
	how := unix.LOCK_EX | unix.LOCK_NB
	if d.readOnly {
		how = unix.LOCK_SH | unix.LOCK_NB
	}
	err := d.withFD(func(fd int) error {
		for {
			err := unix.Flock(fd, how)
			if err != unix.EINTR {
				return err
			}
		}
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return &InUseError{Path: d.path, ReadOnly: d.readOnly}
	default:
		return &diskError{d.path, "lock: " + err.Error(), err}
	}
}

// serialFor derives a stable device ID for GET_ID from the image's device
// and inode numbers: the same image keeps its serial across runs and
// renames (so guests can name it in /dev/disk/by-id), and two images never
// share one by accident.
func serialFor(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "smol-disk"
	}
	h := fnv.New64a()
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[i] = byte(st.Dev >> (8 * i))
		b[8+i] = byte(st.Ino >> (8 * i))
	}
	h.Write(b[:])
	return fmt.Sprintf("smol-%012x", h.Sum64()&(1<<48-1))
}

// Path is the image's path as given to Open.
func (d *Disk) Path() string { return d.path }

// ReadOnly says whether the image was opened read-only.
func (d *Disk) ReadOnly() bool { return d.readOnly }

// Sectors is the capacity in 512-byte sectors.
func (d *Disk) Sectors() uint64 { return d.sectors }

// Serial is the ID derived from the image's identity (see serialFor).
func (d *Disk) Serial() string { return d.serial }

// Close releases the lock and the file. It waits for I/O already running on
// the file; later I/O fails.
func (d *Disk) Close() error {
	if d.cow != nil {
		if !d.readOnly {
			d.flushOverlay() // the bitmap of what it holds
		}
		d.cow.base.Close()
	}
	if err := d.file.Close(); err != nil {
		return fmt.Errorf("close disk %s: %w", d.path, err)
	}
	return nil
}

// withFD runs fn with the file descriptor held: a concurrent Close waits
// until fn returns instead of letting the number be reused under it.
func (d *Disk) withFD(fn func(fd int) error) error {
	var opErr error
	if err := d.raw.Control(func(fd uintptr) { opErr = fn(int(fd)) }); err != nil {
		return fmt.Errorf("disk %s: %w", d.path, err)
	}
	return opErr
}

// iovMax is Linux's limit on iovecs per preadv/pwritev call (UIO_MAXIOV).
const iovMax = 1024

// ReadAt fills bufs, in order, from the image starting at byte offset off.
// It returns the number of bytes read; reading past the end of the file is
// an error (io.ErrUnexpectedEOF), since callers check ranges first and a
// short file means it shrank under the VM.
func (d *Disk) ReadAt(bufs [][]byte, off int64) (int, error) {
	if d.cow != nil {
		return d.readOverlay(bufs, off)
	}
	return d.vectored(bufs, off, unix.Preadv, io.ErrUnexpectedEOF)
}

// WriteAt writes bufs, in order, to the image starting at byte offset off.
func (d *Disk) WriteAt(bufs [][]byte, off int64) (int, error) {
	if d.readOnly {
		return 0, fmt.Errorf("disk %s: write to a read-only disk", d.path)
	}
	if d.cow != nil {
		return d.writeOverlay(bufs, off)
	}
	return d.vectored(bufs, off, unix.Pwritev, io.ErrShortWrite)
}

// vectored drives preadv or pwritev until every buffer is done, resuming
// after short transfers and EINTR.
func (d *Disk) vectored(bufs [][]byte, off int64, op func(int, [][]byte, int64) (int, error), short error) (int, error) {
	// Drop empty buffers and copy the list so advancing does not modify
	// the caller's slice.
	pending := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		if len(b) > 0 {
			pending = append(pending, b)
		}
	}
	total := 0
	err := d.withFD(func(fd int) error {
		for len(pending) > 0 {
			batch := pending
			if len(batch) > iovMax {
				batch = batch[:iovMax]
			}
			n, err := op(fd, batch, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 {
				return short
			}
			total += n
			off += int64(n)
			pending = advance(pending, n)
		}
		return nil
	})
	if err != nil {
		return total, fmt.Errorf("disk %s at byte %d: %w", d.path, off, err)
	}
	return total, nil
}

// advance drops the first n bytes from bufs (which holds no empty buffers).
func advance(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	return bufs
}

// Flush commits written data to stable storage (fdatasync); a layer's
// bitmap follows its data.
func (d *Disk) Flush() error {
	var err error
	if d.cow != nil {
		err = d.flushOverlay()
	} else {
		err = d.fdatasync()
	}
	if err != nil {
		return fmt.Errorf("flush disk %s: %w", d.path, err)
	}
	return nil
}

func (d *Disk) fdatasync() error {
	return d.withFD(func(fd int) error {
		for {
			if err := unix.Fdatasync(fd); err != unix.EINTR {
				return err
			}
		}
	})
}

// Discard gives [off, off+length) back to the host by punching a hole;
// the file keeps its size. Discard is a hint in virtio (the device MAY
// deallocate), so a file system that cannot punch holes is not an error.
func (d *Disk) Discard(off, length int64) error {
	if d.readOnly {
		return fmt.Errorf("disk %s: discard on a read-only disk", d.path)
	}
	if d.cow != nil {
		return wrapZeroes(d, off, length, d.zeroOverlay(off, length, true))
	}
	err := d.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
	if err != nil && !unsupported(err) {
		return fmt.Errorf("discard disk %s [%d, +%d): %w", d.path, off, length, err)
	}
	return nil
}

// WriteZeroes makes [off, off+length) read back as zeroes. With unmap it
// punches a hole (zeroes that cost no host space); otherwise, or where
// punching is unsupported, it asks the file system to zero the range
// (FALLOC_FL_ZERO_RANGE) and, failing that, writes zeroes.
func (d *Disk) WriteZeroes(off, length int64, unmap bool) error {
	if d.readOnly {
		return fmt.Errorf("disk %s: write zeroes on a read-only disk", d.path)
	}
	if d.cow != nil {
		return wrapZeroes(d, off, length, d.zeroOverlay(off, length, unmap))
	}
	return wrapZeroes(d, off, length, d.zeroRange(off, length, unmap))
}

// zeroRange zeroes [off, off+length) of the file.
func (d *Disk) zeroRange(off, length int64, unmap bool) error {
	if length == 0 {
		return nil
	}
	if unmap {
		err := d.fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if err == nil || !unsupported(err) {
			return err
		}
	}
	err := d.fallocate(unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, length)
	if err == nil || !unsupported(err) {
		return err
	}
	return d.writeZeroBytes(off, length)
}

func wrapZeroes(d *Disk, off, length int64, err error) error {
	if err != nil {
		return fmt.Errorf("write zeroes disk %s [%d, +%d): %w", d.path, off, length, err)
	}
	return nil
}

// zeroChunk bounds the buffer the write-zeroes fallback allocates.
const zeroChunk = 1 << 20

func (d *Disk) writeZeroBytes(off, length int64) error {
	zeroes := make([]byte, min(length, zeroChunk))
	for length > 0 {
		n := min(length, int64(len(zeroes)))
		if _, err := d.vectored([][]byte{zeroes[:n]}, off, unix.Pwritev, io.ErrShortWrite); err != nil {
			return err
		}
		off += n
		length -= n
	}
	return nil
}

func (d *Disk) fallocate(mode uint32, off, length int64) error {
	return d.withFD(func(fd int) error {
		for {
			if err := unix.Fallocate(fd, mode, off, length); err != unix.EINTR {
				return err
			}
		}
	})
}

// unsupported reports a file system (or kernel) without a fallocate mode.
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)
}
