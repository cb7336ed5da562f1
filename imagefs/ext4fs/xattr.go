package ext4fs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Xattr is one extended attribute. Value is what a program would pass to
// setxattr(2): for POSIX ACLs that is the kernel's xattr format, which
// Finish converts to ext4's own.
type Xattr struct {
	Name  string
	Value []byte
}

// MaxXattrName is the kernel's limit on an attribute's full name
// (XATTR_NAME_MAX).
const MaxXattrName = 255

// ext4 stores the namespace of a name as an index, and the rest as bytes.
var xattrPrefixes = []struct {
	prefix string
	index  uint8
	exact  bool // the full name is the prefix (ACLs)
}{
	{"user.", 1, false},
	{"system.posix_acl_access", 2, true},
	{"system.posix_acl_default", 3, true},
	{"trusted.", 4, false},
	{"security.", 6, false},
}

// ErrXattrNamespace marks a name in the kernel's system namespace that ext4
// cannot store (only the POSIX ACLs are stored there): callers may skip it.
var ErrXattrNamespace = errors.New("not storable in ext4")

// splitXattrName maps a full name to ext4's (index, suffix), checking it
// the way the kernel's setxattr would: a known namespace, a non-empty
// suffix, no NUL, at most MaxXattrName bytes.
func splitXattrName(name string) (uint8, string, error) {
	if len(name) > MaxXattrName {
		return 0, "", fmt.Errorf("xattr name is %d bytes (at most %d)", len(name), MaxXattrName)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return 0, "", fmt.Errorf("xattr name contains a NUL byte")
	}
	for _, p := range xattrPrefixes {
		if p.exact {
			if name == p.prefix {
				return p.index, "", nil
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, p.prefix); ok {
			if rest == "" {
				return 0, "", fmt.Errorf("xattr name %q has nothing after its namespace", name)
			}
			return p.index, rest, nil
		}
	}
	if strings.HasPrefix(name, "system.") {
		return 0, "", fmt.Errorf("xattr %s: %w", quoteShort(name), ErrXattrNamespace)
	}
	return 0, "", fmt.Errorf("xattr name %s is in no namespace the kernel knows (user., trusted., security., system.)", quoteShort(name))
}

// CheckXattrs validates a node's attributes as Finish will store them: each
// name and value, and that together they fit the one block ext4 gives a
// file's attributes. An error wrapping ErrXattrNamespace names an
// attribute the caller may drop.
func CheckXattrs(xs []Xattr) error {
	_, err := encodeXattrs(xs)
	return err
}

// xattrEntry is one attribute in ext4's form.
type xattrEntry struct {
	index uint8
	name  string
	value []byte
}

func (e xattrEntry) entryLen() int { return (16 + len(e.name) + 3) &^ 3 }
func (e xattrEntry) valueLen() int { return (len(e.value) + 3) &^ 3 }

// encodeXattrs validates and converts attributes, sorted the way ext4
// keeps them in a block (by index, name length, name): the kernel's block
// lookup stops early on that order.
func encodeXattrs(xs []Xattr) ([]xattrEntry, error) {
	es := make([]xattrEntry, 0, len(xs))
	seen := map[string]bool{}
	for _, x := range xs {
		idx, rest, err := splitXattrName(x.Name)
		if err != nil {
			return nil, err
		}
		if seen[x.Name] {
			return nil, fmt.Errorf("xattr %s given twice", quoteShort(x.Name))
		}
		seen[x.Name] = true
		v := x.Value
		if idx == 2 || idx == 3 {
			if v, err = aclToDisk(v); err != nil {
				return nil, fmt.Errorf("xattr %s: %w", x.Name, err)
			}
		}
		es = append(es, xattrEntry{idx, rest, v})
	}
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.index != b.index {
			return a.index < b.index
		}
		if len(a.name) != len(b.name) {
			return len(a.name) < len(b.name)
		}
		return a.name < b.name
	})
	if need := xattrBlockHeader + xattrSpace(es); need > BlockSize {
		return nil, fmt.Errorf("extended attributes take %d bytes, more than the %d ext4 has for one file", need, BlockSize-xattrBlockHeader-4)
	}
	return es, nil
}

const (
	xattrMagic       = 0xEA020000
	xattrBlockHeader = 32
	inodeXattrStart  = 128 + extraIsize // where the in-inode area begins
	inodeXattrFirst  = inodeXattrStart + 4
)

// xattrSpace is the bytes entries, terminator and values take.
func xattrSpace(es []xattrEntry) int {
	n := 4
	for _, e := range es {
		n += e.entryLen() + e.valueLen()
	}
	return n
}

// fitsInInode tells whether the attributes fit after the inode's fixed
// part, where they cost no block.
func fitsInInode(es []xattrEntry) bool {
	return len(es) > 0 && xattrSpace(es) <= inodeSize-inodeXattrFirst
}

// putXattrs lays out entries from the start of area and values from its
// end; offsets are relative to base (the block start, or the first
// in-inode entry). Block entries carry their hash; in-inode ones carry 0,
// as Linux writes them.
func putXattrs(area []byte, base int, es []xattrEntry, withHash bool) {
	pos, end := 0, len(area)
	for _, e := range es {
		end -= e.valueLen()
		copy(area[end:], e.value)
		b := area[pos:]
		b[0] = uint8(len(e.name))
		b[1] = e.index
		binary.LittleEndian.PutUint16(b[2:], uint16(end+base))
		binary.LittleEndian.PutUint32(b[4:], 0)
		binary.LittleEndian.PutUint32(b[8:], uint32(len(e.value)))
		if withHash {
			binary.LittleEndian.PutUint32(b[12:], xattrHash(e))
		}
		copy(b[16:], e.name)
		pos += e.entryLen()
	}
}

// xattrHash is ext4's entry hash: the name's bytes, then the value's
// little-endian words (zero-padded), folded with rotations.
func xattrHash(e xattrEntry) uint32 {
	var h uint32
	for i := 0; i < len(e.name); i++ {
		h = h<<5 ^ h>>27 ^ uint32(e.name[i])
	}
	padded := make([]byte, e.valueLen())
	copy(padded, e.value)
	for i := 0; i+4 <= len(padded); i += 4 {
		h = h<<16 ^ h>>16 ^ binary.LittleEndian.Uint32(padded[i:])
	}
	return h
}

// xattrBlock encodes the attribute block of one inode.
func xattrBlock(es []xattrEntry) []byte {
	b := make([]byte, BlockSize)
	binary.LittleEndian.PutUint32(b[0:], xattrMagic)
	binary.LittleEndian.PutUint32(b[4:], 1) // refcount
	binary.LittleEndian.PutUint32(b[8:], 1) // blocks
	putXattrs(b[xattrBlockHeader:], xattrBlockHeader, es, true)
	var h uint32
	for _, e := range es {
		h = h<<16 ^ h>>16 ^ xattrHash(e)
	}
	binary.LittleEndian.PutUint32(b[12:], h)
	return b
}

// POSIX ACL tags (linux/posix_acl.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

// aclToDisk converts an ACL from the kernel's xattr format (version 2,
// 8-byte entries) to ext4's (version 1; the entries for named users and
// groups keep their id, the others drop it).
func aclToDisk(v []byte) ([]byte, error) {
	if len(v) < 4 || (len(v)-4)%8 != 0 || binary.LittleEndian.Uint32(v) != 2 {
		return nil, fmt.Errorf("not a POSIX ACL (version 2)")
	}
	out := binary.LittleEndian.AppendUint32(nil, 1)
	for p := v[4:]; len(p) > 0; p = p[8:] {
		tag, perm, id := binary.LittleEndian.Uint16(p), binary.LittleEndian.Uint16(p[2:]), binary.LittleEndian.Uint32(p[4:])
		if perm&^7 != 0 {
			return nil, fmt.Errorf("ACL entry with permission bits %#x", perm)
		}
		out = binary.LittleEndian.AppendUint16(out, tag)
		out = binary.LittleEndian.AppendUint16(out, perm)
		switch tag {
		case aclUser, aclGroup:
			out = binary.LittleEndian.AppendUint32(out, id)
		case aclUserObj, aclGroupObj, aclMask, aclOther:
		default:
			return nil, fmt.Errorf("ACL entry with tag %#x", tag)
		}
	}
	return out, nil
}

// quoteShort quotes image-chosen text for a message, cut to a readable
// length.
func quoteShort(s string) string {
	const max = 120
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
