package virtio

import (
	"fmt"
	"io"
)

// cursor walks a list of guest buffers as one stream: the position both
// ChainReader and ChainWriter keep.
type cursor struct {
	mem     Memory
	buffers []Buffer
	off     uint32 // offset into buffers[0]
	moved   uint64 // bytes passed so far
}

// next returns the host view of up to limit bytes at the cursor, never
// crossing a buffer boundary, and moves past them. It returns nil at the
// end of the buffers or for limit 0. verb names the direction in errors.
func (c *cursor) next(limit uint64, verb string) ([]byte, error) {
	if len(c.buffers) == 0 || limit == 0 {
		return nil, nil
	}
	b := c.buffers[0]
	chunk := min(limit, uint64(b.Len-c.off))
	view, err := c.mem.Slice(b.Addr+uint64(c.off), chunk)
	if err != nil {
		return nil, fmt.Errorf("%s chain buffer at %#x: %w", verb, b.Addr, err)
	}
	c.skip(uint32(chunk))
	return view, nil
}

// skip moves past n bytes of the first buffer (n no more than it has left).
func (c *cursor) skip(n uint32) {
	c.off += n
	c.moved += uint64(n)
	if c.off == c.buffers[0].Len {
		c.buffers = c.buffers[1:]
		c.off = 0
	}
}

// remaining returns the number of bytes after the cursor.
func (c *cursor) remaining() uint64 {
	total := uint64(0)
	for _, b := range c.buffers {
		total += uint64(b.Len)
	}
	return total - uint64(c.off)
}

// ChainReader reads a chain's device-readable buffers in order, as one
// stream. The bytes come straight from guest memory, which the driver may
// change concurrently: parse what you read from your own copy.
type ChainReader struct{ c cursor }

// NewReader returns a reader over the chain's readable buffers.
func (c *Chain) NewReader() *ChainReader {
	return &ChainReader{cursor{mem: c.mem, buffers: c.Readable()}}
}

// Read implements io.Reader; it returns io.EOF after the last readable byte.
func (r *ChainReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		src, err := r.c.next(uint64(len(p)-n), "read")
		if err != nil {
			return n, err
		}
		if src == nil {
			break
		}
		n += copy(p[n:], src)
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Next returns the host view of up to limit bytes of the next unread part of
// the readable buffers (never crossing a buffer boundary) and counts them as
// read, for devices that pass data on without a copy of their own. The view
// aliases guest memory: use it only for bytes whose value nothing depends
// on (payload handed to the host as is). It returns nil at the end.
func (r *ChainReader) Next(limit uint32) ([]byte, error) {
	return r.c.next(uint64(limit), "read")
}

// Discard skips n readable bytes without copying them; it returns how many
// it skipped (fewer only at the end of the chain).
func (r *ChainReader) Discard(n uint64) uint64 {
	skipped := uint64(0)
	for skipped < n && len(r.c.buffers) > 0 {
		chunk := min(n-skipped, uint64(r.c.buffers[0].Len-r.c.off))
		r.c.skip(uint32(chunk))
		skipped += chunk
	}
	return skipped
}

// Remaining returns the number of readable bytes not yet read.
func (r *ChainReader) Remaining() uint64 { return r.c.remaining() }

// BytesRead returns how many bytes were read (or discarded) so far.
func (r *ChainReader) BytesRead() uint64 { return r.c.moved }

// ChainWriter writes into a chain's device-writable buffers in order, as one
// stream, and counts the bytes for Push.
type ChainWriter struct{ c cursor }

// NewWriter returns a writer over the chain's writable buffers.
func (c *Chain) NewWriter() *ChainWriter {
	return &ChainWriter{cursor{mem: c.mem, buffers: c.Writable()}}
}

// Write implements io.Writer. Bytes beyond the writable buffers are not
// written: Write writes what fits and returns an error wrapping
// io.ErrShortWrite.
func (w *ChainWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		dst, err := w.c.next(uint64(len(p)-n), "write")
		if err != nil {
			return n, err
		}
		if dst == nil {
			return n, fmt.Errorf("chain has room for %d of %d bytes: %w", n, len(p), io.ErrShortWrite)
		}
		n += copy(dst, p[n:])
	}
	return n, nil
}

// Next returns the host view of up to limit bytes of the next unwritten part of
// the writable buffers (never crossing a buffer boundary) and counts them as
// written, for devices that fill guest memory directly (e.g. io.ReadFull into
// it). It returns nil at the end of the buffers.
func (w *ChainWriter) Next(limit uint32) ([]byte, error) {
	return w.c.next(uint64(limit), "write")
}

// Written returns the number of bytes written so far, the value for Push.
// It fits in 32 bits: Pop bounds a chain's total length.
func (w *ChainWriter) Written() uint32 { return uint32(w.c.moved) }

// Remaining returns the number of writable bytes not yet written.
func (w *ChainWriter) Remaining() uint64 { return w.c.remaining() }
