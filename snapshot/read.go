package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/smolvm/smol/internal/sparsefile"
)

// Reader reads a snapshot file that Open checked.
type Reader struct {
	f        *os.File
	size     int64
	minor    uint16
	sections map[string]entry
	regions  map[string]entry
	ram      entry
}

// Open checks path's header and section table (magic, major version,
// bounds, checksum, one RAM region inside the file) and returns a reader.
// Sections are decoded, and their checksums checked, only when read.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := open(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return r, nil
}

func open(f *os.File) (*Reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, formatErr("not a regular file")
	}
	size := fi.Size()
	header := make([]byte, headerLen)
	if _, err := f.ReadAt(header, 0); err != nil {
		return nil, formatErr("shorter than a snapshot header")
	}
	if !bytes.Equal(header[:8], magic[:]) {
		return nil, formatErr("no snapshot magic")
	}
	le := binary.LittleEndian
	major, minor, n := le.Uint16(header[8:]), le.Uint16(header[10:]), le.Uint32(header[12:])
	if major != Major {
		return nil, formatErr("format version %d.%d; this smol reads %d.x", major, minor, Major)
	}
	if n == 0 || n > MaxSections {
		return nil, formatErr("%d sections (want 1 to %d)", n, MaxSections)
	}
	tableEnd := int64(headerLen) + int64(n)*entryLen
	if tableEnd > size {
		return nil, formatErr("truncated: the section table ends past the file")
	}
	table := make([]byte, tableEnd-headerLen)
	if _, err := f.ReadAt(table, headerLen); err != nil {
		return nil, formatErr("reading the section table: %v", err)
	}
	if sum := sha256.Sum256(table); !bytes.Equal(sum[:], header[20:20+sha256.Size]) {
		return nil, formatErr("the section table's checksum does not match")
	}
	r := &Reader{f: f, size: size, minor: minor, sections: map[string]entry{}, regions: map[string]entry{}}
	haveRAM := false
	for i := 0; i < int(n); i++ {
		e, err := parseEntry(table[i*entryLen : (i+1)*entryLen])
		if err != nil {
			return nil, err
		}
		_, dupSection := r.sections[e.name]
		_, dupRegion := r.regions[e.name]
		if dupSection || dupRegion || e.name == RAMSection && haveRAM {
			return nil, formatErr("section %s appears twice", e.name)
		}
		if e.offset < uint64(tableEnd) || e.offset > uint64(size) || e.length > uint64(size)-e.offset {
			return nil, formatErr("section %s [%d, +%d) lies outside the file's %d bytes (truncated?)", e.name, e.offset, e.length, size)
		}
		if e.name == RAMSection {
			if e.offset%PageSize != 0 || e.length%PageSize != 0 {
				return nil, formatErr("the RAM region [%d, +%d) is not page-aligned", e.offset, e.length)
			}
			r.ram, haveRAM = e, true
			continue
		}
		if e.flags&regionFlag != 0 {
			if e.offset%PageSize != 0 {
				return nil, formatErr("region %s at %d is not page-aligned", e.name, e.offset)
			}
			r.regions[e.name] = e
			continue
		}
		if e.length > MaxSection {
			return nil, formatErr("section %s is %d bytes, over the %d limit", e.name, e.length, MaxSection)
		}
		r.sections[e.name] = e
	}
	if !haveRAM {
		return nil, formatErr("no RAM region")
	}
	return r, nil
}

// Close releases the file.
func (r *Reader) Close() error { return r.f.Close() }

// Has tells whether the snapshot has section name.
func (r *Reader) Has(name string) bool {
	_, ok := r.sections[name]
	return ok
}

// Section decodes section name into v. It must be at version: a state
// struct of another version is refused, never half-decoded.
func (r *Reader) Section(name string, version uint32, v any) error {
	e, ok := r.sections[name]
	if !ok {
		return formatErr("no section %s", name)
	}
	if e.version != version {
		return formatErr("section %s is version %d; this smol reads version %d", name, e.version, version)
	}
	b := make([]byte, e.length)
	if _, err := r.f.ReadAt(b, int64(e.offset)); err != nil && err != io.EOF {
		return formatErr("reading section %s: %v", name, err)
	}
	if sum := sha256.Sum256(b); sum != e.checksum {
		return formatErr("section %s: checksum does not match (corrupt)", name)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return formatErr("section %s: %v", name, err)
	}
	return nil
}

// RAM returns the file and the extent of the guest's RAM in it, for
// mapping: a private mapping of [offset, offset+length) of File.
func (r *Reader) RAM() (f *os.File, offset, length int64) {
	return r.f, int64(r.ram.offset), int64(r.ram.length)
}

// Region returns a raw region (Writer.Region) as a reader of its bytes and
// its length; ok is false when the snapshot has no such region.
func (r *Reader) Region(name string) (rd *io.SectionReader, length int64, ok bool) {
	e, ok := r.regions[name]
	if !ok {
		return nil, 0, false
	}
	return io.NewSectionReader(r.f, int64(e.offset), int64(e.length)), int64(e.length), true
}

// CopyRegion writes region name to dst (a new, empty file), sparsely:
// only the snapshot file's data extents inside the region are read, and
// zero runs stay holes.
func (r *Reader) CopyRegion(name string, dst *os.File) error {
	e, ok := r.regions[name]
	if !ok {
		return formatErr("no region %s", name)
	}
	if err := sparsefile.Copy(dst, r.f, int64(e.offset), 0, int64(e.length)); err != nil {
		return err
	}
	return dst.Truncate(int64(e.length))
}
