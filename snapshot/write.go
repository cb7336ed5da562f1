package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/smolvm/smol/internal/atomicfile"
	"github.com/smolvm/smol/internal/sparsefile"
)

// Writer builds a snapshot file. Sections are kept in memory (they are
// small) until Commit writes the file under a temporary name, the RAM
// last, and links it into place: the path either holds a complete
// snapshot or nothing, and an existing file is never replaced.
type Writer struct {
	path     string
	sections []entry
	payloads [][]byte
	regions  []region
	names    map[string]bool
}

// region is a raw region to copy into the file at Commit.
type region struct {
	name string
	src  io.ReaderAt
	size int64
}

// NewWriter starts a snapshot to be written at path, which must not exist.
func NewWriter(path string) (*Writer, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, os.ErrExist)
	}
	return &Writer{path: path, names: map[string]bool{}}, nil
}

// Section adds v, encoded as JSON, as section name at version.
func (w *Writer) Section(name string, version uint32, v any) error {
	if err := validName(name); err != nil {
		return err
	}
	if name == RAMSection || w.names[name] {
		return fmt.Errorf("snapshot: section %q given twice", name)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("snapshot: section %s: %w", name, err)
	}
	if len(b) > MaxSection {
		return fmt.Errorf("snapshot: section %s is %d bytes, over the %d limit", name, len(b), MaxSection)
	}
	w.names[name] = true
	w.sections = append(w.sections, entry{name: name, version: version, length: uint64(len(b)), checksum: sha256.Sum256(b)})
	w.payloads = append(w.payloads, b)
	return nil
}

// Region adds size bytes of src as raw region name (a disk's contents),
// copied sparsely at Commit after the RAM. A src that is an *os.File is
// read only where it has data (SEEK_DATA), so a sparse disk of 20 GiB
// holding 5 MiB costs 5 MiB of reading.
func (w *Writer) Region(name string, src io.ReaderAt, size int64) error {
	if err := validName(name); err != nil {
		return err
	}
	if name == RAMSection || w.names[name] {
		return fmt.Errorf("snapshot: section %q given twice", name)
	}
	if size < 0 {
		return fmt.Errorf("snapshot: region %s of %d bytes", name, size)
	}
	w.names[name] = true
	w.regions = append(w.regions, region{name: name, src: src, size: size})
	return nil
}

// Commit writes the file with ram (size bytes, a multiple of PageSize)
// as its RAM region. Pages of ram that are all zero become holes.
func (w *Writer) Commit(ram io.ReaderAt, size int64) (err error) {
	if size < 0 || size%PageSize != 0 {
		return fmt.Errorf("snapshot: RAM size %d is not a multiple of %d", size, PageSize)
	}
	n := len(w.sections) + 1 + len(w.regions)
	if n > MaxSections {
		return fmt.Errorf("snapshot: %d sections, over the %d limit", n, MaxSections)
	}
	off := uint64(headerLen + n*entryLen)
	entries := make([]entry, 0, n)
	for i, e := range w.sections {
		e.offset = off
		off += uint64(len(w.payloads[i]))
		entries = append(entries, e)
	}
	regions := append([]region{{name: RAMSection, src: ram, size: size}}, w.regions...)
	for _, r := range regions {
		off = pageAlign(off)
		entries = append(entries, entry{name: r.name, version: 1, flags: regionFlag, offset: off, length: uint64(r.size)})
		off += uint64(r.size)
	}

	var table bytes.Buffer
	for _, e := range entries {
		b := make([]byte, entryLen)
		e.put(b)
		table.Write(b)
	}
	header := make([]byte, headerLen)
	copy(header, magic[:])
	le := binary.LittleEndian
	le.PutUint16(header[8:], Major)
	le.PutUint16(header[10:], Minor)
	le.PutUint32(header[12:], uint32(n))
	sum := sha256.Sum256(table.Bytes())
	copy(header[20:], sum[:])

	tmp := filepath.Join(filepath.Dir(w.path), "."+filepath.Base(w.path)+".tmp-"+atomicfile.RandomSuffix())
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(tmp)
	}()
	var meta bytes.Buffer
	meta.Write(header)
	meta.Write(table.Bytes())
	for _, p := range w.payloads {
		meta.Write(p)
	}
	if _, err := f.Write(meta.Bytes()); err != nil {
		return fmt.Errorf("snapshot %s: %w", w.path, err)
	}
	for i, r := range regions {
		if err := writeSparse(f, int64(entries[len(w.sections)+i].offset), r.src, r.size); err != nil {
			return fmt.Errorf("snapshot %s: %s: %w", w.path, r.name, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("snapshot %s: %w", w.path, err)
	}
	if err := atomicfile.Publish(tmp, w.path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("snapshot %s: %w", w.path, os.ErrExist)
		}
		return fmt.Errorf("snapshot %s: %w", w.path, err)
	}
	return nil
}

func pageAlign(off uint64) uint64 { return (off + PageSize - 1) / PageSize * PageSize }

// writeSparse copies size bytes of src to f at off, leaving holes where
// a whole chunk is zero (or, for a file, where src has a hole), and
// extends f to the end if it is shorter.
func writeSparse(f *os.File, off int64, src io.ReaderAt, size int64) error {
	if err := sparsefile.Copy(f, src, 0, off, size); err != nil {
		return err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() < off+size {
		return f.Truncate(off + size)
	}
	return nil
}
