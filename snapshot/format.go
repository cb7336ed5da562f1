package snapshot

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// The format's version. A file of another major version is refused; a
// newer minor version adds only sections an older reader may ignore.
//
// 1.1 added raw regions besides the RAM (a machine's disks, flagged
// regionFlag in the table); a 1.0 file reads as before.
const (
	Major = 1
	Minor = 1
)

var magic = [8]byte{'S', 'M', 'O', 'L', 'S', 'N', 'A', 'P'}

// Limits checked before anything is decoded.
const (
	MaxSections = 512      // a VM's vCPUs, devices and the rest
	MaxSection  = 16 << 20 // bytes of one state section's JSON
	nameLen     = 24
	headerLen   = 8 + 2 + 2 + 4 + 4 + sha256.Size
	entryLen    = nameLen + 4 + 4 + 8 + 8 + sha256.Size
	// PageSize aligns the RAM region, so that it can be mapped.
	PageSize = 4096
)

// RAMSection names the table entry of the guest's RAM.
const RAMSection = "ram"

// regionFlag marks a table entry as a raw region (the RAM, a disk): bytes
// that are copied or mapped, never decoded, so neither capped nor hashed.
const regionFlag = 1

// ErrFormat wraps every way a file fails to be a snapshot this smol can
// read; the message says which.
var ErrFormat = errors.New("not a usable smol snapshot")

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// entry is one row of the section table.
type entry struct {
	name     string
	version  uint32
	flags    uint32
	offset   uint64
	length   uint64
	checksum [sha256.Size]byte
}

func (e entry) put(b []byte) {
	copy(b[:nameLen], e.name)
	le := binary.LittleEndian
	le.PutUint32(b[nameLen:], e.version)
	le.PutUint32(b[nameLen+4:], e.flags)
	le.PutUint64(b[nameLen+8:], e.offset)
	le.PutUint64(b[nameLen+16:], e.length)
	copy(b[nameLen+24:], e.checksum[:])
}

func parseEntry(b []byte) (entry, error) {
	raw := b[:nameLen]
	n := 0
	for n < len(raw) && raw[n] != 0 {
		c := raw[n]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return entry{}, formatErr("section name %q has a byte that is not [a-z0-9._-]", raw)
		}
		n++
	}
	for _, c := range raw[n:] {
		if c != 0 {
			return entry{}, formatErr("section name %q is not NUL-padded", raw)
		}
	}
	if n == 0 {
		return entry{}, formatErr("a section without a name")
	}
	le := binary.LittleEndian
	e := entry{name: string(raw[:n]), version: le.Uint32(b[nameLen:]), flags: le.Uint32(b[nameLen+4:]), offset: le.Uint64(b[nameLen+8:]), length: le.Uint64(b[nameLen+16:])}
	copy(e.checksum[:], b[nameLen+24:])
	return e, nil
}

func validName(name string) error {
	if name == "" || len(name) > nameLen {
		return fmt.Errorf("snapshot: section name %q: want 1 to %d bytes", name, nameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return fmt.Errorf("snapshot: section name %q: only [a-z0-9._-]", name)
		}
	}
	return nil
}
