package gpu

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"io"
)

// EncodePNG writes img as an 8-bit RGB PNG (a screen has no transparency:
// alpha is dropped). It is image/png's job done faster for screens: that
// encoder tries every filter on every row to find the smallest, which is
// most of a 1280x800 screenshot's time; this one uses the Sub filter
// everywhere (flat areas and gradients, what screens are made of, compress
// well with it) and the fastest deflate level, for about a third of the
// time at a similar size.
func EncodePNG(w io.Writer, img *image.RGBA) error {
	b := img.Bounds()
	width, height := b.Dx(), b.Dy()
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString("\x89PNG\r\n\x1a\n"); err != nil {
		return err
	}
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(height))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits per channel, RGB; deflate, adaptive filtering, no interlace
	writeChunk(bw, "IHDR", ihdr[:])

	idat := &chunkWriter{w: bw, kind: "IDAT"}
	zw, err := zlib.NewWriterLevel(idat, zlib.BestSpeed)
	if err != nil {
		return err
	}
	row := make([]byte, 1+3*width)
	row[0] = 1 // filter type Sub: each byte minus the same channel of the pixel to its left
	for y := 0; y < height; y++ {
		src := img.Pix[img.PixOffset(b.Min.X, b.Min.Y+y):]
		var pr, pg, pb byte
		for x := 0; x < width; x++ {
			r, g, bl := src[4*x], src[4*x+1], src[4*x+2]
			row[1+3*x], row[2+3*x], row[3+3*x] = r-pr, g-pg, bl-pb
			pr, pg, pb = r, g, bl
		}
		if _, err := zw.Write(row); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	idat.flush()
	writeChunk(bw, "IEND", nil)
	if idat.err != nil {
		return idat.err
	}
	return bw.Flush()
}

// writeChunk writes one PNG chunk: length, type, data, CRC of type and data.
func writeChunk(w *bufio.Writer, kind string, data []byte) error {
	var head [8]byte
	binary.BigEndian.PutUint32(head[0:], uint32(len(data)))
	copy(head[4:], kind)
	crc := crc32.NewIEEE()
	crc.Write(head[4:])
	crc.Write(data)
	var tail [4]byte
	binary.BigEndian.PutUint32(tail[:], crc.Sum32())
	w.Write(head[:])
	w.Write(data)
	_, err := w.Write(tail[:])
	return err
}

// chunkWriter cuts a stream into chunks of one kind, 64 KiB each.
type chunkWriter struct {
	w    *bufio.Writer
	kind string
	buf  []byte
	err  error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	if len(c.buf) >= 64<<10 {
		c.flush()
	}
	return len(p), c.err
}

func (c *chunkWriter) flush() {
	if len(c.buf) > 0 && c.err == nil {
		c.err = writeChunk(c.w, c.kind, c.buf)
	}
	c.buf = c.buf[:0]
}
