// Package tarcopy moves file trees as tar streams, with their modes and
// times, for `smol machine cp`: Pack on the sending side, Unpack on the
// receiving one. The same code runs in the guest agent and on the host;
// on the host the stream comes from a hostile guest, so Unpack confines
// every name to its directory (os.Root) and, with Hostile, creates no
// device node, no setuid or setgid bit and no foreign owner.
package tarcopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Pack writes the file, directory or symlink at src as a tar stream whose
// top entry is named name. Symlinks are sent as symlinks, never followed.
func Pack(w io.Writer, src, name string) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		entry := name
		if rel != "." {
			entry = name + "/" + filepath.ToSlash(rel)
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname, h.Format = entry, "", "", tar.FormatPAX
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(tw, onlyReader{f}, buf)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type onlyReader struct{ io.Reader }

// Target resolves a copy's destination the way cp does: into dst when it
// is a directory (the tree keeps its name), else as dst itself (the tree
// is renamed to dst's last component, in dst's directory, which must
// exist).
func Target(dst string) (dir, rename string, err error) {
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		return dst, "", nil
	}
	parent := filepath.Dir(dst)
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("%s: no such directory", parent)
	}
	return parent, filepath.Base(dst), nil
}

// Options shape an Unpack.
type Options struct {
	Rename string // new name of the stream's top entry ("" keeps it)
	// Owners applies the stream's owners (the guest agent, as root).
	Owners bool
	// Hostile: the stream comes from the guest. Device nodes are refused
	// and setuid, setgid and sticky bits dropped.
	Hostile bool
}

// Unpack extracts a tar stream under dir; nothing it creates can be
// outside dir, whatever names, links or symlinks the stream holds.
func Unpack(r io.Reader, dir string, o Options) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirTimes struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirTimes
	tr := tar.NewReader(r)
	buf := make([]byte, 1<<20)
	top := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name, err := rename(h.Name, &top, o.Rename)
		if err != nil {
			return err
		}
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		if !o.Hostile {
			mode |= specialBits(h.Mode)
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, dirTimes{name, mode, h.ModTime})
		case tar.TypeReg, tar.TypeRegA:
			removeNonDir(root, name)
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(onlyWriter{f}, tr, buf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			root.Chtimes(name, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			removeNonDir(root, name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			target, err := rename(h.Linkname, &top, o.Rename)
			if err != nil {
				return err
			}
			removeNonDir(root, name)
			if err := root.Link(target, name); err != nil {
				return err
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if o.Hostile {
				return fmt.Errorf("%s: the copy holds a device node or FIFO; not created on the host", strconv.Quote(h.Name))
			}
			if err := mknod(filepath.Join(dir, name), h, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unsupported entry type %q", strconv.Quote(h.Name), h.Typeflag)
		}
		if o.Owners && h.Typeflag != tar.TypeLink {
			root.Lchown(name, h.Uid, h.Gid)
		}
	}
	// Directories last, deepest first: their own modes (a 0500 directory
	// must not refuse its children) and times (adding children changed
	// them).
	for i := len(dirs) - 1; i >= 0; i-- {
		root.Chmod(dirs[i].name, dirs[i].mode)
		root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime)
	}
	return nil
}

// rename cleans a member name (as if rooted, so nothing climbs out) and
// replaces its first component, which every member must share, with to.
func rename(name string, top *string, to string) (string, error) {
	clean := strings.TrimPrefix(path.Clean("/"+name), "/")
	if clean == "" {
		return "", fmt.Errorf("tar member %s names the directory itself", strconv.Quote(name))
	}
	first, rest, _ := strings.Cut(clean, "/")
	if *top == "" {
		*top = first
	} else if first != *top {
		return "", fmt.Errorf("tar member %s is outside the copied tree", strconv.Quote(name))
	}
	if to != "" {
		first = to
	}
	if rest == "" {
		return first, nil
	}
	return first + "/" + rest, nil
}

func specialBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// removeNonDir clears the way for a new entry; a directory stays (an
// entry cannot replace it).
func removeNonDir(root *os.Root, name string) {
	if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
		root.Remove(name)
	}
}

type onlyWriter struct{ io.Writer }

// Pipe is a kernel pipe with a large buffer, for connecting a tar stream's
// producer and consumer: unlike io.Pipe, the two sides overlap (reading
// the network and writing the disk) instead of taking turns.
func Pipe() (*os.File, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	setPipeSize(w, 1<<20)
	return r, w, nil
}
