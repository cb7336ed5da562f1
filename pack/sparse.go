package pack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/smolvm/smol/internal/sparsefile"
)

// A section's bytes, before compression, are its image as records: the
// image cut into chunkSize chunks, and only the chunks that are not all
// zero written, each as its offset (u64), its length (u32) and its bytes.
// A 20 GiB writable layer holding 50 MiB is then 50 MiB of records, and
// the records depend only on the image's contents (not on which of its
// zeros the filesystem allocated), which keeps packs deterministic.

const (
	chunkSize = 64 << 10
	recordHdr = 8 + 4
)

// encode writes src's size bytes to w as records, reading only the data
// extents of a file src.
func encode(w io.Writer, src io.ReaderAt, size int64) error {
	buf := make([]byte, chunkSize)
	var hdr [recordHdr]byte
	next := int64(0) // the first chunk not yet written: extents may share one
	return sparsefile.DataExtents(src, 0, size, func(start, end int64) error {
		// Chunks are aligned to the image, whatever the extents are.
		for pos := max(start/chunkSize*chunkSize, next); pos < end; pos += chunkSize {
			next = pos + chunkSize
			n := min(chunkSize, size-pos)
			if _, err := src.ReadAt(buf[:n], pos); err != nil && !(errors.Is(err, io.EOF) && n > 0) {
				return err
			}
			if sparsefile.Zero(buf[:n]) {
				continue
			}
			binary.LittleEndian.PutUint64(hdr[:8], uint64(pos))
			binary.LittleEndian.PutUint32(hdr[8:], uint32(n))
			if _, err := w.Write(hdr[:]); err != nil {
				return err
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
		}
		return nil
	})
}

// decode reads records from r and writes them to dst, an image of size
// bytes. Records must be chunk-aligned, in increasing order, and inside
// the image: anything else is a damaged or hostile section.
func decode(r io.Reader, dst io.WriterAt, size int64) error {
	buf := make([]byte, chunkSize)
	var hdr [recordHdr]byte
	next := int64(0)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return formatErr("a truncated record: %v", err)
		}
		off, n := int64(binary.LittleEndian.Uint64(hdr[:8])), int64(binary.LittleEndian.Uint32(hdr[8:]))
		if off < next || off%chunkSize != 0 || n == 0 || n > chunkSize || off > size-n {
			return formatErr("a record [%d, +%d) out of order or outside the %d-byte image", off, n, size)
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return formatErr("a truncated record at %d: %v", off, err)
		}
		if _, err := dst.WriteAt(buf[:n], off); err != nil {
			return fmt.Errorf("write the image at %d: %w", off, err)
		}
		next = off + n
	}
}
