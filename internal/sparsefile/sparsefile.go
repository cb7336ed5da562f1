// Package sparsefile copies files that are mostly holes (disk images,
// guest RAM) in time proportional to their data: a copy-on-write clone
// where the filesystem has one, else a copy of the data extents only,
// with holes left as holes.
package sparsefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Extenter is a source that knows its own data extents (a layered disk).
type Extenter interface {
	DataExtents(from, to int64, fn func(start, end int64) error) error
}

// DataExtents calls fn for each run of [from, to) of src that may hold
// data: for a regular file, its data extents (SEEK_DATA, SEEK_HOLE), so
// holes are skipped without being read; for an Extenter, its own;
// otherwise all of it.
func DataExtents(src io.ReaderAt, from, to int64, fn func(start, end int64) error) error {
	if e, ok := src.(Extenter); ok {
		return e.DataExtents(from, to, fn)
	}
	f, ok := src.(*os.File)
	if !ok {
		return fn(from, to)
	}
	fd := int(f.Fd())
	for pos := from; pos < to; {
		start, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) || err == nil && start >= to {
			return nil // only a hole remains
		}
		if err != nil {
			return fn(pos, to) // no SEEK_DATA here: read the rest
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil || end > to {
			end = to
		}
		if err := fn(start, end); err != nil {
			return err
		}
		pos = end
	}
	return nil
}

// Copy writes length bytes of src from srcOff to dst at dstOff, reading
// only src's data extents and leaving chunks that are all zero as holes.
// dst is not extended; the caller sets its size.
func Copy(dst io.WriterAt, src io.ReaderAt, srcOff, dstOff, length int64) error {
	buf := make([]byte, 64<<10)
	return DataExtents(src, srcOff, srcOff+length, func(start, end int64) error {
		for pos := start; pos < end; pos += int64(len(buf)) {
			n := min(int64(len(buf)), end-pos)
			if _, err := src.ReadAt(buf[:n], pos); err != nil && !(errors.Is(err, io.EOF) && n > 0) {
				return err
			}
			if Zero(buf[:n]) {
				continue
			}
			if _, err := dst.WriteAt(buf[:n], pos-srcOff+dstOff); err != nil {
				return err
			}
		}
		return nil
	})
}

// Zero tells whether b is all zero bytes.
func Zero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Clone makes dst (which must not exist) a copy of src: a copy-on-write
// clone sharing src's blocks (FICLONE) where the filesystem can, else a
// sparse copy of its data. It reports which it made, and leaves no dst
// behind on failure.
func Clone(src, dst string) (reflinked bool, err error) {
	return clone(src, dst, true)
}

// ErrNoReflink: the filesystem cannot clone files (FICLONE).
var ErrNoReflink = errors.New("the filesystem cannot clone files")

// Reflink makes dst (which must not exist) a copy-on-write clone of src,
// or fails with ErrNoReflink (leaving no dst) where the filesystem has
// none.
func Reflink(src, dst string) error {
	_, err := clone(src, dst, false)
	return err
}

func clone(src, dst string, orCopy bool) (reflinked bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return false, err
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return true, nil
	}
	if !orCopy {
		return false, ErrNoReflink
	}
	if err := Copy(out, in, 0, 0, fi.Size()); err != nil {
		return false, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Truncate(fi.Size()); err != nil {
		return false, err
	}
	return false, out.Sync()
}
