// Package rootlookup finds a command's user and program inside the root
// it will run in (a container's), as the command itself would see them:
// every path resolved inside that root (package inroot), so that an
// image's absolute symlink (/usr/bin/java -> /etc/alternatives/java)
// means the image's file, never the caller's. The guest agent uses it
// for every command; the containerd shim uses it on the host while the
// pod's VM boots, so that the guest need not read the image's files over
// 9P to start a container.
package rootlookup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/smolvm/smol/internal/inroot"
	"golang.org/x/sys/unix"
)

// User is who a command runs as.
type User struct {
	Name     string
	UID, GID uint32
	Groups   []uint32
	Home     string
}

// LookupUser resolves an image's USER or -u value: "", NAME, UID,
// NAME:GROUP, UID:GID (and mixtures), from the root's /etc/passwd and
// /etc/group. A numeric user without a passwd entry is allowed, as
// Docker allows it. Groups, if not nil, are the supplementary groups
// exactly (the caller's); nil takes the user's from /etc/group.
func LookupUser(spec string, groups []uint32, rootFD int) (User, error) {
	if spec == "" {
		spec = "root"
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	u := User{Name: name, Home: "/"}
	entry, found := findEntry(rootFD, "/etc/passwd", name, 2)
	switch {
	case found:
		uid, err1 := strconv.ParseUint(entry[2], 10, 32)
		gid, err2 := strconv.ParseUint(entry[3], 10, 32)
		if err1 != nil || err2 != nil {
			return User{}, fmt.Errorf("user %s: malformed /etc/passwd entry", name)
		}
		u.Name, u.UID, u.GID = entry[0], uint32(uid), uint32(gid)
		if len(entry) > 5 && entry[5] != "" {
			u.Home = entry[5]
		}
	case isNumber(name):
		uid, _ := strconv.ParseUint(name, 10, 32)
		u.UID, u.GID = uint32(uid), uint32(uid)
	case name == "root":
		u.Home = "/root"
	default:
		return User{}, fmt.Errorf("user %s not found in the image's /etc/passwd", name)
	}
	if hasGroup {
		if g, ok := findEntry(rootFD, "/etc/group", group, 2); ok {
			gid, err := strconv.ParseUint(g[2], 10, 32)
			if err != nil {
				return User{}, fmt.Errorf("group %s: malformed /etc/group entry", group)
			}
			u.GID = uint32(gid)
		} else if isNumber(group) {
			gid, _ := strconv.ParseUint(group, 10, 32)
			u.GID = uint32(gid)
		} else {
			return User{}, fmt.Errorf("group %s not found in the image's /etc/group", group)
		}
	}
	if u.Groups = groups; u.Groups == nil {
		u.Groups = supplementaryGroups(rootFD, u.Name, u.GID)
	}
	return u, nil
}

// maxAccountFile bounds what is read of an image's /etc/passwd or
// /etc/group: the image is not trusted to keep them small.
const maxAccountFile = 16 << 20

// File opens the regular file name of the root for reading, or
// returns nil: missing, not a regular file (a FIFO there must not hang
// the command's start) or unreadable are all "no such file" to callers.
func File(rootFD int, name string) *os.File {
	fd, err := inroot.OpenFile(rootFD, name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), name)
}

// accountLines scans a passwd-style file of the root, bounded.
func accountLines(rootFD int, name string) (*bufio.Scanner, func()) {
	f := File(rootFD, name)
	if f == nil {
		return nil, func() {}
	}
	return bufio.NewScanner(io.LimitReader(f, maxAccountFile)), func() { f.Close() }
}

// findEntry finds the line of a passwd-style file whose name (field 0) or
// numeric id (field idField) is key.
func findEntry(rootFD int, file, key string, idField int) ([]string, bool) {
	s, done := accountLines(rootFD, file)
	defer done()
	if s == nil {
		return nil, false
	}
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) <= idField {
			continue
		}
		if fields[0] == key || (isNumber(key) && fields[idField] == key) {
			return fields, true
		}
	}
	return nil, false
}

// supplementaryGroups lists the groups of /etc/group that name a user as
// a member, plus its primary group.
func supplementaryGroups(rootFD int, name string, primary uint32) []uint32 {
	groups := []uint32{primary}
	s, done := accountLines(rootFD, "/etc/group")
	defer done()
	if s == nil {
		return groups
	}
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) < 4 {
			continue
		}
		for _, member := range strings.Split(fields[3], ",") {
			if member == name {
				if gid, err := strconv.ParseUint(fields[2], 10, 32); err == nil && uint32(gid) != primary {
					groups = append(groups, uint32(gid))
				}
			}
		}
	}
	return groups
}

// NumericIDs parses a user given as UID:GID, both numbers.
func NumericIDs(spec string) (uid, gid uint32, ok bool) {
	u, g, hasGroup := strings.Cut(spec, ":")
	if !hasGroup || !isNumber(u) || !isNumber(g) {
		return 0, 0, false
	}
	uid64, _ := strconv.ParseUint(u, 10, 32)
	gid64, _ := strconv.ParseUint(g, 10, 32)
	return uint32(uid64), uint32(gid64), true
}

func isNumber(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// EnvValue returns the last value of key in a command's environment
// (later entries win).
func EnvValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// DefaultPath is the PATH of a command whose environment has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LookPath finds an executable the way a shell does, in the command's own
// PATH (not the agent's).
func LookPath(file, path, dir string, rootFD int) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := Executable(rootFD, p); err != nil {
			return "", fmt.Errorf("%s: %v", file, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if Executable(rootFD, p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", file)
}

// Executable says whether p is a file the command can execute.
func Executable(rootFD int, p string) error {
	st, err := statIn(rootFD, p)
	if err != nil {
		return fmt.Errorf("no such file")
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// IsDir says whether p is a directory of the root.
func IsDir(rootFD int, p string) bool {
	st, err := statIn(rootFD, p)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// statIn stats p inside the root, following its symlinks there.
func statIn(rootFD int, p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := inroot.Open(rootFD, p, 0)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	return st, unix.Fstat(fd, &st)
}
