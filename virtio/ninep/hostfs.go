package ninep

import (
	"errors"
	"os"
	"strconv"
	"sync"

	"github.com/hugelgupf/p9/fsimpl/templatefs"
	"github.com/hugelgupf/p9/linux"
	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// The served tree. Every file the guest names is reached from the tree's
// root one name at a time with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS) and O_NOFOLLOW, and held as an O_PATH
// descriptor: the guest's ".." and symlinks are never followed by the host
// (a symlink is handed to the guest as a symlink, which its kernel
// resolves in its own namespace), so nothing outside the tree is ever
// reached, whatever the guest makes inside it. Data is read and written
// through a descriptor reopened from that one (/proc/self/fd), after the
// file was checked to be a regular file or a directory: device nodes,
// FIFOs and sockets are never opened on the host, and the guest cannot
// create them. A read-only tree refuses every change on the host side.
//
// Ownership: files are created as, and owned by, the user smol runs as;
// the guest sees the host's uids and gids as they are, and a change of
// owner succeeds only where that user may make it.

// tree is one served directory.
type tree struct {
	root     *os.File // O_PATH
	readOnly bool
}

// newTree opens dir as a tree.
func newTree(dir string, readOnly bool) (*tree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &tree{root: os.NewFile(uintptr(fd), dir), readOnly: readOnly}, nil
}

// dupCloseOnExec duplicates fd, close-on-exec like every descriptor the
// VMM opens: a plain dup is inherited by the programs it starts (a fork's
// VMMs), each holding the share open for its life.
func dupCloseOnExec(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

// Attach implements p9.Attacher: the tree's root.
func (t *tree) Attach() (p9.File, error) {
	fd, err := dupCloseOnExec(int(t.root.Fd()))
	if err != nil {
		return nil, err
	}
	return &file{tree: t, fd: fd}, nil
}

// file is one fid: an O_PATH descriptor and, once opened, a descriptor for
// I/O.
type file struct {
	p9.DefaultWalkGetAttr
	templatefs.NoopRenamed
	templatefs.NotLockable
	templatefs.XattrUnimplemented

	tree *tree
	fd   int // O_PATH, of the file itself

	mu      sync.Mutex
	io      *os.File    // after Open
	entries []p9.Dirent // a directory's listing, read at its first Readdir
}

var _ p9.File = (*file)(nil)

// validName refuses what is not one name inside a directory.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		return linux.EINVAL
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return linux.EINVAL
		}
	}
	return nil
}

// beneath opens name in the directory dirfd, never leaving the tree and
// never following a symlink.
func beneath(dirfd int, name string, flags uint64, mode uint32) (int, error) {
	if err := validName(name); err != nil {
		return -1, err
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
			Flags:   flags | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_SYMLINKS,
		})
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func (f *file) stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(f.fd, &st)
	return st, err
}

func qidOf(st unix.Stat_t) p9.QID {
	return p9.QID{Type: p9.FileMode(st.Mode).QIDType(), Path: st.Ino, Version: uint32(st.Mtim.Nsec)}
}

// Walk implements p9.File.
func (f *file) Walk(names []string) ([]p9.QID, p9.File, error) {
	cur, err := dupCloseOnExec(f.fd)
	if err != nil {
		return nil, nil, err
	}
	var qids []p9.QID
	for _, name := range names {
		next, err := beneath(cur, name, unix.O_PATH, 0)
		unix.Close(cur)
		if err != nil {
			return nil, nil, err
		}
		cur = next
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			unix.Close(cur)
			return nil, nil, err
		}
		qids = append(qids, qidOf(st))
	}
	return qids, &file{tree: f.tree, fd: cur}, nil
}

// procPath names f's descriptor for calls that take a path: the kernel
// resolves it to the file the descriptor holds, not to a name.
func (f *file) procPath() string { return "/proc/self/fd/" + strconv.Itoa(f.fd) }

// Open implements p9.File: regular files and directories only.
func (f *file) Open(mode p9.OpenFlags) (p9.QID, uint32, error) {
	st, err := f.stat()
	if err != nil {
		return p9.QID{}, 0, err
	}
	kind := st.Mode & unix.S_IFMT
	if kind != unix.S_IFREG && kind != unix.S_IFDIR {
		return p9.QID{}, 0, linux.EPERM // no device, FIFO or socket is opened on the host
	}
	flags := mode.OSFlags()
	if flags != unix.O_RDONLY && f.tree.readOnly {
		return p9.QID{}, 0, linux.EROFS
	}
	fd, err := unix.Open(f.procPath(), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return p9.QID{}, 0, err
	}
	f.mu.Lock()
	f.io = os.NewFile(uintptr(fd), "")
	f.mu.Unlock()
	return qidOf(st), 0, nil
}

// ReadAt implements p9.File.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if f.io == nil {
		return 0, linux.EBADF
	}
	n, err := f.io.ReadAt(p, off)
	if errors.Is(err, os.ErrClosed) {
		return n, linux.EBADF
	}
	if err != nil && n > 0 {
		err = nil // a short read at the end of the file
	}
	if err != nil && err.Error() == "EOF" {
		err = nil
	}
	return n, err
}

// WriteAt implements p9.File.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if f.tree.readOnly {
		return 0, linux.EROFS
	}
	if f.io == nil {
		return 0, linux.EBADF
	}
	return f.io.WriteAt(p, off)
}

// FSync implements p9.File.
func (f *file) FSync() error {
	if f.io == nil {
		return nil
	}
	return f.io.Sync()
}

// Close implements p9.File.
func (f *file) Close() error {
	if f.io != nil {
		f.io.Close()
	}
	return unix.Close(f.fd)
}

// GetAttr implements p9.File.
func (f *file) GetAttr(req p9.AttrMask) (p9.QID, p9.AttrMask, p9.Attr, error) {
	st, err := f.stat()
	if err != nil {
		return p9.QID{}, p9.AttrMask{}, p9.Attr{}, err
	}
	return qidOf(st), req, p9.Attr{
		Mode: p9.FileMode(st.Mode), UID: p9.UID(st.Uid), GID: p9.GID(st.Gid), NLink: p9.NLink(st.Nlink),
		RDev: p9.Dev(st.Rdev), Size: uint64(st.Size), BlockSize: uint64(st.Blksize), Blocks: uint64(st.Blocks),
		ATimeSeconds: uint64(st.Atim.Sec), ATimeNanoSeconds: uint64(st.Atim.Nsec),
		MTimeSeconds: uint64(st.Mtim.Sec), MTimeNanoSeconds: uint64(st.Mtim.Nsec),
		CTimeSeconds: uint64(st.Ctim.Sec), CTimeNanoSeconds: uint64(st.Ctim.Nsec),
	}, nil
}

// SetAttr implements p9.File.
func (f *file) SetAttr(valid p9.SetAttrMask, attr p9.SetAttr) error {
	if f.tree.readOnly {
		return linux.EROFS
	}
	st, err := f.stat()
	if err != nil {
		return err
	}
	symlink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if valid.Size {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return linux.EINVAL
		}
		if err := unix.Truncate(f.procPath(), int64(attr.Size)); err != nil {
			return err
		}
	}
	if valid.Permissions && !symlink {
		if err := unix.Chmod(f.procPath(), uint32(attr.Permissions.Permissions())); err != nil {
			return err
		}
	}
	if valid.UID || valid.GID {
		uid, gid := -1, -1
		if valid.UID {
			uid = int(attr.UID)
		}
		if valid.GID {
			gid = int(attr.GID)
		}
		if err := unix.Fchownat(f.fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
			return err
		}
	}
	if (valid.ATime || valid.MTime) && !symlink {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if valid.ATime {
			ts[0] = unix.Timespec{Nsec: unix.UTIME_NOW}
			if valid.ATimeNotSystemTime {
				ts[0] = unix.Timespec{Sec: int64(attr.ATimeSeconds), Nsec: int64(attr.ATimeNanoSeconds)}
			}
		}
		if valid.MTime {
			ts[1] = unix.Timespec{Nsec: unix.UTIME_NOW}
			if valid.MTimeNotSystemTime {
				ts[1] = unix.Timespec{Sec: int64(attr.MTimeSeconds), Nsec: int64(attr.MTimeNanoSeconds)}
			}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, f.procPath(), ts, 0); err != nil {
			return err
		}
	}
	return nil
}

// StatFS implements p9.File.
func (f *file) StatFS() (p9.FSStat, error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(f.fd, &s); err != nil {
		return p9.FSStat{}, err
	}
	return p9.FSStat{Type: uint32(s.Type), BlockSize: uint32(s.Bsize), Blocks: s.Blocks, BlocksFree: s.Bfree,
		BlocksAvailable: s.Bavail, Files: s.Files, FilesFree: s.Ffree, NameLength: uint32(s.Namelen)}, nil
}

// writable refuses a change to a read-only tree.
func (f *file) writable() error {
	if f.tree.readOnly {
		return linux.EROFS
	}
	return nil
}

// child stats name in the directory f, for its QID.
func (f *file) child(name string) (p9.QID, error) {
	fd, err := beneath(f.fd, name, unix.O_PATH, 0)
	if err != nil {
		return p9.QID{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return p9.QID{}, err
	}
	return qidOf(st), nil
}

// Create implements p9.File: a new regular file, opened.
func (f *file) Create(name string, flags p9.OpenFlags, perm p9.FileMode, _ p9.UID, _ p9.GID) (p9.File, p9.QID, uint32, error) {
	if err := f.writable(); err != nil {
		return nil, p9.QID{}, 0, err
	}
	iofd, err := beneath(f.fd, name, uint64(flags.OSFlags()|unix.O_CREAT|unix.O_EXCL), uint32(perm.Permissions()))
	if err != nil {
		return nil, p9.QID{}, 0, err
	}
	pathfd, err := beneath(f.fd, name, unix.O_PATH, 0)
	if err != nil {
		unix.Close(iofd)
		return nil, p9.QID{}, 0, err
	}
	nf := &file{tree: f.tree, fd: pathfd, io: os.NewFile(uintptr(iofd), name)}
	st, err := nf.stat()
	if err != nil {
		nf.Close()
		return nil, p9.QID{}, 0, err
	}
	return nf, qidOf(st), 0, nil
}

// Mkdir implements p9.File.
func (f *file) Mkdir(name string, perm p9.FileMode, _ p9.UID, _ p9.GID) (p9.QID, error) {
	if err := f.writable(); err != nil {
		return p9.QID{}, err
	}
	if err := validName(name); err != nil {
		return p9.QID{}, err
	}
	if err := unix.Mkdirat(f.fd, name, uint32(perm.Permissions())); err != nil {
		return p9.QID{}, err
	}
	return f.child(name)
}

// Symlink implements p9.File: the link's target is the guest's text; the
// host never follows it.
func (f *file) Symlink(target, name string, _ p9.UID, _ p9.GID) (p9.QID, error) {
	if err := f.writable(); err != nil {
		return p9.QID{}, err
	}
	if err := validName(name); err != nil {
		return p9.QID{}, err
	}
	if err := unix.Symlinkat(target, f.fd, name); err != nil {
		return p9.QID{}, err
	}
	return f.child(name)
}

// Link implements p9.File: a hard link to target, a file of this tree
// (the server only passes fids it gave out).
func (f *file) Link(target p9.File, name string) error {
	if err := f.writable(); err != nil {
		return err
	}
	t, ok := target.(*file)
	if !ok || t.tree != f.tree {
		return linux.EXDEV
	}
	if err := validName(name); err != nil {
		return err
	}
	st, err := t.stat()
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return linux.EPERM
	}
	return unix.Linkat(unix.AT_FDCWD, t.procPath(), f.fd, name, unix.AT_SYMLINK_FOLLOW)
}

// Mknod implements p9.File: refused; the guest makes no device node,
// FIFO or socket on the host.
func (f *file) Mknod(string, p9.FileMode, uint32, uint32, p9.UID, p9.GID) (p9.QID, error) {
	if err := f.writable(); err != nil {
		return p9.QID{}, err
	}
	return p9.QID{}, linux.EPERM
}

// RenameAt implements p9.File.
func (f *file) RenameAt(oldName string, newDir p9.File, newName string) error {
	if err := f.writable(); err != nil {
		return err
	}
	nd, ok := newDir.(*file)
	if !ok || nd.tree != f.tree {
		return linux.EXDEV
	}
	if err := validName(oldName); err != nil {
		return err
	}
	if err := validName(newName); err != nil {
		return err
	}
	return unix.Renameat(f.fd, oldName, nd.fd, newName)
}

// Rename implements p9.File: the server renames through RenameAt of the
// parent when the client asks by fid.
func (f *file) Rename(p9.File, string) error { return linux.ENOSYS }

// UnlinkAt implements p9.File.
func (f *file) UnlinkAt(name string, flags uint32) error {
	if err := f.writable(); err != nil {
		return err
	}
	if err := validName(name); err != nil {
		return err
	}
	return unix.Unlinkat(f.fd, name, int(flags&unix.AT_REMOVEDIR))
}

// Readlink implements p9.File.
func (f *file) Readlink() (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(f.fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// maxReaddir bounds the entries one Readdir answers (the server fits what
// it can into the guest's buffer; the guest asks again from there).
const maxReaddir = 1024

// Readdir implements p9.File: the listing is read once, at offset 0, and
// served from there by position.
func (f *file) Readdir(offset uint64, count uint32) (p9.Dirents, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.io == nil {
		return nil, linux.EBADF
	}
	if offset == 0 || f.entries == nil {
		if _, err := f.io.Seek(0, 0); err != nil {
			return nil, err
		}
		names, err := f.io.Readdirnames(-1)
		if err != nil {
			return nil, err
		}
		f.entries = make([]p9.Dirent, 0, len(names))
		for _, name := range names {
			qid, err := f.child(name)
			if err != nil {
				continue // gone meanwhile
			}
			f.entries = append(f.entries, p9.Dirent{QID: qid, Type: qid.Type, Name: name, Offset: uint64(len(f.entries) + 1)})
		}
	}
	if offset >= uint64(len(f.entries)) {
		return nil, nil
	}
	end := min(uint64(len(f.entries)), offset+maxReaddir)
	return append(p9.Dirents(nil), f.entries[offset:end]...), nil
}
