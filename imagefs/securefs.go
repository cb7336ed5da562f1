package imagefs

import (
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Path handling inside the staging root. Everything here works on directory
// file descriptors and *at system calls with O_NOFOLLOW, so no path string
// is ever handed to the kernel for a walk that could cross a symlink
// planted by a layer.

// cleanName maps a tar member name to a clean path relative to the root:
// "" for the root itself. Leading "/" and any ".." are neutralised by
// cleaning the name as if it were rooted, so nothing can climb out.
func cleanName(n string) string {
	return strings.TrimPrefix(path.Clean("/"+n), "/")
}

// splitParent returns the parent directory ("" = root) and base of a clean
// relative path.
func splitParent(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

func joinRel(dir, base string) string {
	if dir == "" {
		return base
	}
	return dir + "/" + base
}

const maxSymlinkHops = 40

// openDir returns an O_PATH descriptor for directory rel below the root
// and the real path it resolved to (no symlinks). A symlink met on the way
// is resolved scoped to the root: absolute targets restart at the root and
// ".." stops at it. With create, missing directories are made (0755, or
// 0700 for the unprivileged caller, who needs to write into them) and
// reported to made. The caller closes the descriptor.
func (u *unpacker) openDir(rel string, create bool) (int, string, error) {
	type frame struct {
		fd   int
		name string
	}
	var stack []frame
	cur := func() int {
		if len(stack) == 0 {
			return u.root
		}
		return stack[len(stack)-1].fd
	}
	realPath := func() string {
		names := make([]string, len(stack))
		for i, f := range stack {
			names[i] = f.name
		}
		return strings.Join(names, "/")
	}
	closeAll := func() {
		for _, f := range stack {
			unix.Close(f.fd)
		}
		stack = stack[:0]
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
			if n := len(stack); n > 0 {
				unix.Close(stack[n-1].fd)
				stack = stack[:n-1]
			}
			continue
		}
		fd, err := unix.Openat(cur(), c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && create {
			if err = unix.Mkdirat(cur(), c, u.dirPerm(0o755)); err == nil || err == unix.EEXIST {
				if err == nil {
					u.created(joinRel(realPath(), c), &fileMeta{mode: 0o755})
				}
				fd, err = unix.Openat(cur(), c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err == unix.ENOTDIR || err == unix.ELOOP {
			var st unix.Stat_t
			if unix.Fstatat(cur(), c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				hops++
				target, rerr := readlinkat(cur(), c)
				if rerr != nil || hops > maxSymlinkHops {
					closeAll()
					if rerr == nil {
						rerr = unix.ELOOP
					}
					return -1, "", &os.PathError{Op: "resolve", Path: rel, Err: rerr}
				}
				if strings.HasPrefix(target, "/") {
					closeAll()
				}
				todo = append(strings.Split(target, "/"), todo...)
				continue
			}
		}
		if err != nil {
			p := joinRel(realPath(), c)
			closeAll()
			return -1, "", &os.PathError{Op: "open", Path: p, Err: err}
		}
		stack = append(stack, frame{fd, c})
	}
	if len(stack) == 0 {
		fd, err := unix.Openat(u.root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return fd, "", err
	}
	real := realPath()
	top := stack[len(stack)-1].fd
	for _, f := range stack[:len(stack)-1] {
		unix.Close(f.fd)
	}
	return top, real, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// removeAt removes name in dirfd, recursively if it is a directory,
// without following symlinks. A missing name is not an error.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return &os.PathError{Op: "unlink", Path: name, Err: err}
	}
	fd, oerr := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if oerr != nil {
		return &os.PathError{Op: "unlink", Path: name, Err: err}
	}
	names, err := readDirNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}

// readDirNames lists a directory given a descriptor opened for reading;
// the descriptor stays open.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}
