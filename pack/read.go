package pack

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
)

// Reader reads a .smolmachine file that Open checked.
type Reader struct {
	f         *os.File
	dataStart int64 // in f: a pack appended to a stub starts past the stub
	Manifest  Manifest
	// ID is the SHA-256 of the manifest as stored: since the manifest
	// holds every section's digest, it names the whole pack.
	ID string
}

// Open checks path's header, caps and decodes its manifest, and checks
// every section's extent against the file. Sections are decompressed and
// their digests checked only by Extract (or Verify).
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, formatErr("not a regular file"))
	}
	r, err := OpenAt(f, 0, fi.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// OpenAt checks the pack of size bytes at base in f (a single-file stub
// carries its pack after its own code) as Open does. The Reader owns f.
func OpenAt(f *os.File, base, size int64) (*Reader, error) {
	header := make([]byte, headerLen)
	if _, err := f.ReadAt(header, base); err != nil || size < headerLen {
		return nil, formatErr("shorter than a header")
	}
	if !bytes.Equal(header[:8], magic[:]) {
		return nil, formatErr("no SMOLPACK magic")
	}
	le := binary.LittleEndian
	major, minor, n := le.Uint16(header[8:]), le.Uint16(header[10:]), le.Uint32(header[12:])
	if major != Major {
		return nil, formatErr("format version %d.%d; this smol reads %d.x", major, minor, Major)
	}
	if n == 0 || n > MaxManifest || int64(headerLen)+int64(n) > size {
		return nil, formatErr("a manifest of %d bytes in a %d-byte file", n, size)
	}
	raw := make([]byte, n)
	if _, err := f.ReadAt(raw, base+headerLen); err != nil {
		return nil, formatErr("reading the manifest: %v", err)
	}
	sum := sha256.Sum256(raw)
	r := &Reader{f: f, dataStart: base + int64(headerLen) + int64(n), ID: hex.EncodeToString(sum[:])}
	if err := json.Unmarshal(raw, &r.Manifest); err != nil {
		return nil, formatErr("manifest: %v", err)
	}
	if err := r.Manifest.check(int64(headerLen)+int64(n), size); err != nil {
		return nil, err
	}
	return r, nil
}

// Close releases the file.
func (r *Reader) Close() error { return r.f.Close() }

// Extract decompresses section name into dst (an empty file: the image is
// written sparsely, then sized), checking its size and digest: a section
// that does not match its manifest entry is refused.
func (r *Reader) Extract(name string, dst *os.File) error {
	s, ok := r.Manifest.Section(name)
	if !ok {
		return formatErr("no section %s", name)
	}
	if err := r.decompress(s, dst); err != nil {
		return err
	}
	return dst.Truncate(s.Size)
}

// Verify decompresses every section, checking sizes and digests, and
// writes nothing.
func (r *Reader) Verify() error {
	for _, s := range r.Manifest.Sections {
		if err := r.decompress(s, discardAt{}); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) decompress(s Section, dst io.WriterAt) error {
	dec, err := zstd.NewReader(io.NewSectionReader(r.f, r.dataStart+s.Offset, s.Length), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer dec.Close()
	// The records of an image of Size bytes take at most Size bytes of
	// data plus a header per chunk: a section that decompresses to more is
	// refused there, not followed.
	limit := s.Size + (s.Size/chunkSize+1)*recordHdr
	h := sha256.New()
	lr := &io.LimitedReader{R: io.TeeReader(dec, h), N: limit + 1}
	if err := decode(lr, dst, s.Size); err != nil {
		return fmt.Errorf("section %s: %w", s.Name, err)
	}
	if lr.N == 0 {
		return formatErr("section %s decompresses to more than its %d bytes", s.Name, s.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != s.SHA256 {
		return formatErr("section %s: sha256 %s, the manifest says %s (damaged or altered)", s.Name, got, s.SHA256)
	}
	return nil
}

type discardAt struct{}

func (discardAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
