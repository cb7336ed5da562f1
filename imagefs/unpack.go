package imagefs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/smolvm/smol/imagefs/ext4fs"
)

// unpacker applies OCI layers, in order, to a tree held in memory whose
// file data streams straight into the ext4 image (ext4fs). Nothing of a
// layer is ever created on the host filesystem, so no mode, owner, device
// number or capability of an image can take effect on the host, and no
// layer-chosen path is ever handed to the kernel.
type unpacker struct {
	w      *ext4fs.Writer
	root   *ext4fs.Node
	limits Limits
	bytes  int64 // counted against limits.MaxBytes: file data, names, link targets, xattrs
	count  int   // entries, counted against limits.MaxEntries
	seen   map[slot]bool
	note   func(format string, args ...any)
}

// slot is a name in a directory: whiteouts and opaque markers spare what
// the current layer itself wrote there.
type slot struct {
	dir  *ext4fs.Node
	name string
}

func newUnpacker(w *ext4fs.Writer, limits Limits, note func(string, ...any)) *unpacker {
	if note == nil {
		note = func(string, ...any) {}
	}
	return &unpacker{w: w, root: w.Root(), limits: limits, note: note}
}

// applyLayer applies one uncompressed layer tar stream.
func (u *unpacker) applyLayer(r io.Reader) error {
	u.seen = map[slot]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading layer: %w", err)
		}
		e, err := u.check(h)
		if err == nil {
			err = u.apply(h, e, tr)
		}
		if err != nil {
			return fmt.Errorf("layer entry %s: %w", quoteShort(h.Name), err)
		}
	}
}

// checked is what check derived from a valid header.
type checked struct {
	rel    string
	xattrs []ext4fs.Xattr
}

// check validates a header completely before anything of it is applied,
// and counts it against the limits: an invalid entry fails the layer with
// the tree untouched by it.
func (u *unpacker) check(h *tar.Header) (checked, error) {
	var c checked
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
	case tar.TypeXGlobalHeader:
		return c, nil
	default:
		return c, fmt.Errorf("unsupported tar entry type %q", h.Typeflag)
	}
	if err := checkPath("name", h.Name, maxPath); err != nil {
		return c, err
	}
	if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
		if h.Linkname == "" {
			return c, errors.New("link with an empty target")
		}
		if err := checkPath("link target", h.Linkname, ext4fs.BlockSize-1); err != nil {
			return c, err
		}
	}
	if h.Uid < 0 || h.Gid < 0 || h.Uid > maxID || h.Gid > maxID {
		return c, fmt.Errorf("owner %d:%d out of range", h.Uid, h.Gid)
	}
	if h.Typeflag == tar.TypeChar || h.Typeflag == tar.TypeBlock {
		if h.Devmajor < 0 || h.Devmajor >= 1<<12 || h.Devminor < 0 || h.Devminor >= 1<<20 {
			return c, fmt.Errorf("device number %d:%d out of range", h.Devmajor, h.Devminor)
		}
	}
	if h.Size < 0 {
		return c, fmt.Errorf("negative size")
	}
	need := int64(len(h.Name) + len(h.Linkname))
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		x := []ext4fs.Xattr{{Name: name, Value: []byte(v)}}
		if err := ext4fs.CheckXattrs(x); errors.Is(err, ext4fs.ErrXattrNamespace) {
			u.note("dropping xattr %s of %s: %v", quoteShort(name), quoteShort(h.Name), err)
			continue
		} else if err != nil {
			return c, err
		}
		c.xattrs = append(c.xattrs, x[0])
		need += int64(len(name) + len(v))
	}
	if err := ext4fs.CheckXattrs(c.xattrs); err != nil {
		return c, err
	}
	if h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeLink {
		need += h.Size
	}
	if err := u.charge(need); err != nil {
		return c, err
	}
	c.rel = cleanName(h.Name)
	return c, nil
}

const (
	maxPath = 4096      // PATH_MAX
	maxID   = 1<<32 - 2 // (uid_t)-1 means "no change" to the kernel
)

// checkPath refuses a NUL byte (no kernel path can hold one), a path over
// max bytes and a component over 255 (NAME_MAX).
func checkPath(what, p string, max int) error {
	if len(p) > max {
		return fmt.Errorf("%s is %d bytes (at most %d)", what, len(p), max)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%s contains a NUL byte", what)
	}
	for _, c := range strings.Split(p, "/") {
		if len(c) > 255 {
			return fmt.Errorf("%s has a component of %d bytes (at most 255)", what, len(c))
		}
	}
	return nil
}

// charge counts one entry and n bytes against the limits.
func (u *unpacker) charge(n int64) error {
	u.count++
	if u.count > u.limits.MaxEntries {
		return &LimitError{What: "entries", Limit: int64(u.limits.MaxEntries), Env: envMaxEntries}
	}
	u.bytes += n
	if u.bytes > u.limits.MaxBytes {
		return &LimitError{What: "bytes", Limit: u.limits.MaxBytes, Env: envMaxSize}
	}
	return nil
}

func (u *unpacker) apply(h *tar.Header, c checked, r io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if c.rel == "" {
		if h.Typeflag == tar.TypeDir {
			u.setMeta(u.root, h, c)
		}
		return nil
	}
	dir, base := splitParent(c.rel)
	if strings.HasPrefix(base, ".wh.") {
		return u.whiteout(dir, base)
	}
	parent, err := u.resolveDir(dir, true)
	if err != nil {
		return err
	}
	old := parent.Children[base]
	var n *ext4fs.Node
	switch h.Typeflag {
	case tar.TypeDir:
		if old != nil && old.IsDir() {
			n = old // an upper layer's directory entry restates its metadata
		} else {
			n = ext4fs.NewDir(0, 0, 0, h.ModTime)
		}
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse:
		n = &ext4fs.Node{Mode: ext4fs.TypeReg}
		if _, err := u.w.WriteData(n, r); err != nil {
			return err
		}
	case tar.TypeSymlink:
		n = &ext4fs.Node{Mode: ext4fs.TypeSymlink, Link: h.Linkname}
	case tar.TypeLink:
		t, err := u.linkTarget(h.Linkname)
		if err != nil {
			return err
		}
		parent.Children[base] = t
		u.seen[slot{parent, base}] = true
		return nil
	case tar.TypeChar:
		n = &ext4fs.Node{Mode: ext4fs.TypeChar, Major: uint32(h.Devmajor), Minor: uint32(h.Devminor)}
	case tar.TypeBlock:
		n = &ext4fs.Node{Mode: ext4fs.TypeBlock, Major: uint32(h.Devmajor), Minor: uint32(h.Devminor)}
	case tar.TypeFifo:
		n = &ext4fs.Node{Mode: ext4fs.TypeFifo}
	}
	u.setMeta(n, h, c)
	parent.Children[base] = n
	u.seen[slot{parent, base}] = true
	return nil
}

// setMeta takes owner, mode, time and xattrs from the header. Symlinks
// are always 0777, as Linux makes them.
func (u *unpacker) setMeta(n *ext4fs.Node, h *tar.Header, c checked) {
	perm := uint32(h.Mode) & 0o7777
	if n.Type() == ext4fs.TypeSymlink {
		perm = 0o777
	}
	n.Mode = n.Type() | perm
	n.UID, n.GID = uint32(h.Uid), uint32(h.Gid)
	n.Mtime = h.ModTime
	n.Xattrs = c.xattrs
}

// linkTarget finds a hardlink's target inside the root, resolved like any
// other path; a target that does not exist there (e.g. one that pointed
// outside) fails the layer.
func (u *unpacker) linkTarget(name string) (*ext4fs.Node, error) {
	rel := cleanName(name)
	if rel == "" {
		return nil, errors.New("hardlink to the root directory")
	}
	dir, base := splitParent(rel)
	parent, err := u.resolveDir(dir, false)
	if err != nil {
		return nil, fmt.Errorf("hardlink target %s: %w", quoteShort(name), err)
	}
	t := parent.Children[base]
	if t == nil {
		return nil, fmt.Errorf("hardlink target %s: %w", quoteShort(name), os.ErrNotExist)
	}
	if t.IsDir() {
		return nil, fmt.Errorf("hardlink target %s is a directory", quoteShort(name))
	}
	return t, nil
}

const maxSymlinkHops = 40

// resolveDir walks to directory rel. A symlink met on the way is resolved
// scoped to the root, as containerd does: absolute targets restart at the
// root and ".." stops at it. With create, missing directories are made
// (0755, root-owned) and count as written by this layer.
func (u *unpacker) resolveDir(rel string, create bool) (*ext4fs.Node, error) {
	var stack []*ext4fs.Node // the directories below the root, in order
	cur := func() *ext4fs.Node {
		if len(stack) == 0 {
			return u.root
		}
		return stack[len(stack)-1]
	}
	todo := strings.Split(rel, "/")
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		next := cur().Children[c]
		if next == nil {
			if !create {
				return nil, os.ErrNotExist
			}
			if err := u.charge(int64(len(c))); err != nil {
				return nil, err
			}
			next = ext4fs.NewDir(0o755, 0, 0, time.Time{})
			cur().Children[c] = next
			u.seen[slot{cur(), c}] = true
		}
		switch next.Type() {
		case ext4fs.TypeSymlink:
			if hops++; hops > maxSymlinkHops {
				return nil, syscall.ELOOP
			}
			if strings.HasPrefix(next.Link, "/") {
				stack = stack[:0]
			}
			todo = append(strings.Split(next.Link, "/"), todo...)
		case ext4fs.TypeDir:
			stack = append(stack, next)
		default:
			return nil, fmt.Errorf("%s: %w", quoteShort(c), syscall.ENOTDIR)
		}
	}
	return cur(), nil
}

// whiteout handles ".wh.NAME" (NAME from lower layers is deleted) and
// ".wh..wh..opq" (the directory is opaque: its lower-layer contents go).
// Neither marker is created. Missing targets are fine.
func (u *unpacker) whiteout(dir, base string) error {
	d, err := u.resolveDir(dir, false)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	if base == ".wh..wh..opq" {
		u.clearLower(d)
		return nil
	}
	if strings.HasPrefix(base, ".wh..wh.") { // other AUFS bookkeeping
		return nil
	}
	name := strings.TrimPrefix(base, ".wh.")
	if name == "" || name == "." || name == ".." || u.seen[slot{d, name}] {
		return nil
	}
	delete(d.Children, name)
	return nil
}

// clearLower removes everything below d not written by the current
// layer, descending into directories this layer did write.
func (u *unpacker) clearLower(d *ext4fs.Node) {
	for name, c := range d.Children {
		if !u.seen[slot{d, name}] {
			delete(d.Children, name)
		} else if c.IsDir() {
			u.clearLower(c)
		}
	}
}
