package imagefs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// unpacker applies OCI layers, in order, to a staging directory.
//
// It records for every path it creates the ownership, mode, and any device
// node or xattr it could not materialise (not root, or the staging
// filesystem refuses), so that the ext4 image can be fixed up afterwards
// with debugfs. Paths in meta are real paths relative to the root.
type unpacker struct {
	root       int    // O_PATH descriptor of the staging root
	rootPath   string // for the root's own metadata and the final walk
	privileged bool   // may chown and mknod
	meta       map[string]*fileMeta
	dirTimes   map[string]time.Time
	seen       map[string]bool // paths written by the current layer
	buf        []byte
	note       func(format string, args ...any)
	notedDev   bool
}

// fileMeta is what the image wants for one path.
type fileMeta struct {
	uid, gid int
	mode     uint32            // permission bits incl. setuid/setgid/sticky
	dev      *devNode          // device to create in the ext4 image (placeholder in staging)
	xattrs   map[string]string // xattrs to set in the ext4 image
}

type devNode struct {
	kind         byte // 'c' or 'b'
	major, minor uint32
}

func newUnpacker(rootPath string, privileged bool, note func(string, ...any)) (*unpacker, error) {
	fd, err := unix.Open(rootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rootPath, Err: err}
	}
	if note == nil {
		note = func(string, ...any) {}
	}
	u := &unpacker{
		root: fd, rootPath: rootPath, privileged: privileged,
		meta: map[string]*fileMeta{"": {mode: 0o755}}, dirTimes: map[string]time.Time{},
		buf: make([]byte, 1<<20), note: note,
	}
	if err := os.Chmod(rootPath, os.FileMode(u.dirPerm(0o755))); err != nil {
		u.close()
		return nil, err
	}
	return u, nil
}

func (u *unpacker) close() {
	if u.root >= 0 {
		unix.Close(u.root)
		u.root = -1
	}
}

// dirPerm/filePerm give the mode used in staging. The unprivileged caller
// must keep owner access so that it can fill directories and mke2fs can read
// every file; the wanted mode is applied in the ext4 image instead.
func (u *unpacker) dirPerm(m uint32) uint32 {
	if u.privileged {
		return m
	}
	return m | 0o700
}

func (u *unpacker) filePerm(m uint32) uint32 {
	if u.privileged {
		return m
	}
	return m | 0o600
}

func (u *unpacker) created(p string, m *fileMeta) {
	u.meta[p] = m
	u.seen[p] = true
}

// applyLayer applies one uncompressed layer tar stream.
func (u *unpacker) applyLayer(r io.Reader) error {
	u.seen = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading layer: %w", err)
		}
		if err := u.entry(h, tr); err != nil {
			return fmt.Errorf("layer entry %q: %w", h.Name, err)
		}
	}
}

func (u *unpacker) entry(h *tar.Header, r io.Reader) error {
	switch h.Typeflag {
	case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil
	}
	rel := cleanName(h.Name)
	if rel == "" {
		if h.Typeflag == tar.TypeDir {
			return u.rootEntry(h)
		}
		return nil
	}
	dir, base := splitParent(rel)
	if strings.HasPrefix(base, ".wh.") {
		return u.whiteout(dir, base)
	}
	pfd, real, err := u.openDir(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	p := joinRel(real, base)
	m := &fileMeta{uid: h.Uid, gid: h.Gid, mode: uint32(h.Mode) & 0o7777}
	switch h.Typeflag {
	case tar.TypeDir:
		err = u.mkdir(pfd, base, p, h, m)
	case tar.TypeReg, tar.TypeRegA:
		err = u.writeFile(pfd, base, p, h, m, r)
	case tar.TypeSymlink:
		err = u.symlink(pfd, base, p, h, m)
	case tar.TypeLink:
		return u.hardlink(pfd, base, p, h)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		err = u.mknod(pfd, base, p, h, m)
	default:
		u.note("skipping %s: unsupported tar entry type %q", h.Name, h.Typeflag)
		return nil
	}
	if err != nil {
		return err
	}
	if h.Typeflag != tar.TypeDir {
		delete(u.dirTimes, p)
	}
	u.created(p, m)
	return nil
}

func (u *unpacker) rootEntry(h *tar.Header) error {
	m := &fileMeta{uid: h.Uid, gid: h.Gid, mode: uint32(h.Mode) & 0o7777}
	u.meta[""] = m
	if u.privileged {
		os.Lchown(u.rootPath, h.Uid, h.Gid)
	}
	if err := unix.Chmod(u.rootPath, u.dirPerm(m.mode)); err != nil {
		return err
	}
	u.dirTimes[""] = h.ModTime
	return nil
}

// whiteout handles ".wh.NAME" (NAME from lower layers is deleted) and
// ".wh..wh..opq" (the directory is opaque: its lower-layer contents go).
// Neither marker is created. Missing targets are fine.
func (u *unpacker) whiteout(dir, base string) error {
	fd, real, err := u.openDir(dir, false)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if base == ".wh..wh..opq" {
		return u.clearLower(fd, real)
	}
	if strings.HasPrefix(base, ".wh..wh.") { // other AUFS bookkeeping
		return nil
	}
	name := strings.TrimPrefix(base, ".wh.")
	if name == "" || name == "." || name == ".." || u.seen[joinRel(real, name)] {
		return nil
	}
	return removeAt(fd, name)
}

// clearLower removes everything below dirfd not written by the current
// layer, descending into directories this layer did write.
func (u *unpacker) clearLower(dirfd int, real string) error {
	rfd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readDirNames(rfd)
	unix.Close(rfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := joinRel(real, n)
		if !u.seen[p] {
			if err := removeAt(dirfd, n); err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(dirfd, n, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not a directory
		}
		err = u.clearLower(cfd, p)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

func (u *unpacker) mkdir(pfd int, base, p string, h *tar.Header, m *fileMeta) error {
	err := unix.Mkdirat(pfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err = removeAt(pfd, base); err == nil {
				err = unix.Mkdirat(pfd, base, 0o700)
			}
		}
	}
	if err != nil {
		return err
	}
	u.chown(pfd, base, m)
	if err := unix.Fchmodat(pfd, base, u.dirPerm(m.mode), 0); err != nil {
		return err
	}
	u.setXattrs(pfd, base, h, m)
	u.dirTimes[p] = h.ModTime // set last, after the children are in
	return nil
}

func (u *unpacker) writeFile(pfd int, base, p string, h *tar.Header, m *fileMeta, r io.Reader) error {
	const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(pfd, base, flags, 0o600)
	if err == unix.EEXIST {
		if err = removeAt(pfd, base); err == nil {
			fd, err = unix.Openat(pfd, base, flags, 0o600)
		}
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if _, err := io.CopyBuffer(writerOnly{f}, r, u.buf); err != nil {
		return err
	}
	u.chown(pfd, base, m)
	if err := unix.Fchmod(fd, u.filePerm(m.mode)); err != nil {
		return err
	}
	u.setXattrs(pfd, base, h, m)
	return u.setTimes(pfd, base, h)
}

func (u *unpacker) symlink(pfd int, base, p string, h *tar.Header, m *fileMeta) error {
	if err := removeAt(pfd, base); err != nil {
		return err
	}
	if err := unix.Symlinkat(h.Linkname, pfd, base); err != nil {
		return err
	}
	m.mode = 0o777
	u.chown(pfd, base, m)
	u.setXattrs(pfd, base, h, m)
	return u.setTimes(pfd, base, h)
}

// hardlink links to a target resolved inside the root like any other path;
// a target that does not exist there (e.g. one that pointed outside) fails
// the layer.
func (u *unpacker) hardlink(pfd int, base, p string, h *tar.Header) error {
	target := cleanName(h.Linkname)
	if target == "" {
		return fmt.Errorf("hardlink to the root directory")
	}
	tdir, tbase := splitParent(target)
	tfd, treal, err := u.openDir(tdir, false)
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", h.Linkname, err)
	}
	defer unix.Close(tfd)
	tp := joinRel(treal, tbase)
	if tp == p {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hardlink target %q: %w", h.Linkname, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("hardlink target %q is a directory", h.Linkname)
	}
	if err := removeAt(pfd, base); err != nil {
		return err
	}
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return fmt.Errorf("hardlink to %q: %w", h.Linkname, err)
	}
	m := u.meta[tp] // same inode, same metadata
	if m == nil {
		m = &fileMeta{mode: uint32(st.Mode) & 0o7777, uid: int(st.Uid), gid: int(st.Gid)}
	}
	u.created(p, m)
	return nil
}

func (u *unpacker) mknod(pfd int, base, p string, h *tar.Header, m *fileMeta) error {
	if err := removeAt(pfd, base); err != nil {
		return err
	}
	var typ uint32
	switch h.Typeflag {
	case tar.TypeChar:
		typ = unix.S_IFCHR
	case tar.TypeBlock:
		typ = unix.S_IFBLK
	default:
		typ = unix.S_IFIFO
	}
	dev := unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))
	var err error = unix.EPERM
	if typ == unix.S_IFIFO || u.privileged {
		err = unix.Mknodat(pfd, base, typ|u.filePerm(m.mode), int(dev))
	}
	if err == unix.EPERM && typ != unix.S_IFIFO {
		// Not allowed here: leave an empty placeholder and create the node
		// in the ext4 image with debugfs.
		kind := byte('c')
		if typ == unix.S_IFBLK {
			kind = 'b'
		}
		m.dev = &devNode{kind: kind, major: uint32(h.Devmajor), minor: uint32(h.Devminor)}
		fd, oerr := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if oerr != nil {
			return oerr
		}
		unix.Close(fd)
		if !u.notedDev {
			u.notedDev = true
			u.note("cannot create device nodes here (not root); adding them to the ext4 image with debugfs")
		}
		return nil
	}
	if err != nil {
		return err
	}
	u.chown(pfd, base, m)
	if err := unix.Fchmodat(pfd, base, u.filePerm(m.mode), 0); err != nil {
		return err
	}
	u.setXattrs(pfd, base, h, m)
	return u.setTimes(pfd, base, h)
}

// chown sets ownership when privileged. Failure (e.g. an unmapped uid in a
// user namespace) is not fatal: the final walk sees the mismatch and fixes
// it in the ext4 image.
func (u *unpacker) chown(pfd int, base string, m *fileMeta) {
	if u.privileged {
		unix.Fchownat(pfd, base, m.uid, m.gid, unix.AT_SYMLINK_NOFOLLOW)
	}
}

// setXattrs applies SCHILY.xattr.* PAX records. There is no lsetxattrat, so
// the name is reached through the /proc magic link of the parent
// descriptor, which the kernel does not re-resolve; the l-variant does not
// follow the last component. What fails is kept for debugfs.
func (u *unpacker) setXattrs(pfd int, base string, h *tar.Header, m *fileMeta) {
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || name == "" {
			continue
		}
		if err := unix.Lsetxattr(fmt.Sprintf("/proc/self/fd/%d/%s", pfd, base), name, []byte(v), 0); err != nil {
			if m.xattrs == nil {
				m.xattrs = map[string]string{}
			}
			m.xattrs[name] = v
		}
	}
}

func (u *unpacker) setTimes(pfd int, base string, h *tar.Header) error {
	t := unix.NsecToTimespec(h.ModTime.UnixNano())
	if h.ModTime.IsZero() {
		return nil
	}
	err := unix.UtimesNanoAt(pfd, base, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.EPERM || err == unix.EACCES {
		return nil
	}
	return err
}

// finish sets directory times, which adding children had changed.
func (u *unpacker) finish() {
	for p, mt := range u.dirTimes {
		if mt.IsZero() {
			continue
		}
		dir, base := splitParent(p)
		if p == "" {
			dir, base = "", "."
		}
		fd, _, err := u.openDir(dir, false)
		if err != nil {
			continue
		}
		t := unix.NsecToTimespec(mt.UnixNano())
		unix.UtimesNanoAt(fd, base, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(fd)
	}
}

// writerOnly hides os.File's ReadFrom so io.CopyBuffer uses our large
// buffer instead of falling back to a 32 KiB one.
type writerOnly struct{ io.Writer }
