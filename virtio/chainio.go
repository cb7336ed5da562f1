package virtio

import (
	"fmt"
	"io"
)

// ChainReader reads a chain's device-readable buffers in order, as one
// stream. The bytes come straight from guest memory, which the driver may
// change concurrently: parse what you read from your own copy.
type ChainReader struct {
	mem     Memory
	buffers []Buffer
	off     uint32 // offset into buffers[0]
	read    uint64
}

// NewReader returns a reader over the chain's readable buffers.
func (c *Chain) NewReader() *ChainReader {
	return &ChainReader{mem: c.mem, buffers: c.Readable()}
}

// Read implements io.Reader; it returns io.EOF after the last readable byte.
func (r *ChainReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(r.buffers) > 0 {
		b := r.buffers[0]
		chunk := min(uint64(len(p)-n), uint64(b.Len-r.off))
		src, err := r.mem.Slice(b.Addr+uint64(r.off), chunk)
		if err != nil {
			return n, fmt.Errorf("read chain buffer at %#x: %w", b.Addr, err)
		}
		n += copy(p[n:], src)
		r.advance(uint32(chunk))
	}
	r.read += uint64(n)
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Discard skips n readable bytes without copying them; it returns how many
// it skipped (fewer only at the end of the chain).
func (r *ChainReader) Discard(n uint64) uint64 {
	skipped := uint64(0)
	for skipped < n && len(r.buffers) > 0 {
		chunk := min(n-skipped, uint64(r.buffers[0].Len-r.off))
		r.advance(uint32(chunk))
		skipped += chunk
	}
	r.read += skipped
	return skipped
}

// Next returns the host view of up to limit bytes of the next unread part of
// the readable buffers (never crossing a buffer boundary) and counts them as
// read, for devices that pass data on without a copy of their own. The view
// aliases guest memory: use it only for bytes whose value nothing depends
// on (payload handed to the host as is). It returns nil at the end.
func (r *ChainReader) Next(limit uint32) ([]byte, error) {
	if len(r.buffers) == 0 || limit == 0 {
		return nil, nil
	}
	b := r.buffers[0]
	chunk := min(limit, b.Len-r.off)
	src, err := r.mem.Slice(b.Addr+uint64(r.off), uint64(chunk))
	if err != nil {
		return nil, fmt.Errorf("read chain buffer at %#x: %w", b.Addr, err)
	}
	r.advance(chunk)
	r.read += uint64(chunk)
	return src, nil
}

func (r *ChainReader) advance(n uint32) {
	r.off += n
	if r.off == r.buffers[0].Len {
		r.buffers = r.buffers[1:]
		r.off = 0
	}
}

// Remaining returns the number of readable bytes not yet read.
func (r *ChainReader) Remaining() uint64 {
	total := uint64(0)
	for _, b := range r.buffers {
		total += uint64(b.Len)
	}
	return total - uint64(r.off)
}

// BytesRead returns how many bytes were read (or discarded) so far.
func (r *ChainReader) BytesRead() uint64 { return r.read }

// ChainWriter writes into a chain's device-writable buffers in order, as one
// stream, and counts the bytes for Push.
type ChainWriter struct {
	mem     Memory
	buffers []Buffer
	off     uint32
	written uint32
}

// NewWriter returns a writer over the chain's writable buffers.
func (c *Chain) NewWriter() *ChainWriter {
	return &ChainWriter{mem: c.mem, buffers: c.Writable()}
}

// Write implements io.Writer. Bytes beyond the writable buffers are not
// written: Write writes what fits and returns an error wrapping
// io.ErrShortWrite.
func (w *ChainWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(w.buffers) > 0 {
		b := w.buffers[0]
		chunk := min(uint64(len(p)-n), uint64(b.Len-w.off))
		dst, err := w.mem.Slice(b.Addr+uint64(w.off), chunk)
		if err != nil {
			return n, fmt.Errorf("write chain buffer at %#x: %w", b.Addr, err)
		}
		n += copy(dst, p[n:])
		w.advance(uint32(chunk))
	}
	if n < len(p) {
		return n, fmt.Errorf("chain has room for %d of %d bytes: %w", n, len(p), io.ErrShortWrite)
	}
	return n, nil
}

// Next returns the host view of up to limit bytes of the next unwritten part of
// the writable buffers (never crossing a buffer boundary) and counts them as
// written, for devices that fill guest memory directly (e.g. io.ReadFull into
// it). It returns nil at the end of the buffers.
func (w *ChainWriter) Next(limit uint32) ([]byte, error) {
	if len(w.buffers) == 0 || limit == 0 {
		return nil, nil
	}
	b := w.buffers[0]
	chunk := min(limit, b.Len-w.off)
	dst, err := w.mem.Slice(b.Addr+uint64(w.off), uint64(chunk))
	if err != nil {
		return nil, fmt.Errorf("write chain buffer at %#x: %w", b.Addr, err)
	}
	w.advance(chunk)
	return dst, nil
}

func (w *ChainWriter) advance(n uint32) {
	w.off += n
	w.written += n
	if w.off == w.buffers[0].Len {
		w.buffers = w.buffers[1:]
		w.off = 0
	}
}

// Written returns the number of bytes written so far, the value for Push.
func (w *ChainWriter) Written() uint32 { return w.written }

// Remaining returns the number of writable bytes not yet written.
func (w *ChainWriter) Remaining() uint64 {
	total := uint64(0)
	for _, b := range w.buffers {
		total += uint64(b.Len)
	}
	return total - uint64(w.off)
}
