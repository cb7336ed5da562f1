package main

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

// user is who a command runs as.
type user struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string
}

// A command's user, working directory and program are looked up in its
// root (rootFD: a container's, or the guest's own "/") as the command
// will see them: each path resolved inside that root (package inroot),
// so that an image's absolute symlink (/usr/bin/java ->
// /etc/alternatives/java) means the image's file, never the guest's.

// lookupUser resolves an image's USER or -u value: "", NAME, UID,
// NAME:GROUP, UID:GID (and mixtures), from the root's /etc/passwd and
// /etc/group. A numeric user without a passwd entry is allowed, as
// Docker allows it. Groups, if not nil, are the supplementary groups
// exactly (the caller's); nil takes the user's from /etc/group.
func lookupUser(spec string, groups []uint32, rootFD int) (user, error) {
	if spec == "" {
		spec = "root"
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	u := user{name: name, home: "/"}
	entry, found := findEntry(rootFD, "/etc/passwd", name, 2)
	switch {
	case found:
		uid, err1 := strconv.ParseUint(entry[2], 10, 32)
		gid, err2 := strconv.ParseUint(entry[3], 10, 32)
		if err1 != nil || err2 != nil {
			return user{}, fmt.Errorf("user %s: malformed /etc/passwd entry", name)
		}
		u.name, u.uid, u.gid = entry[0], uint32(uid), uint32(gid)
		if len(entry) > 5 && entry[5] != "" {
			u.home = entry[5]
		}
	case isNumber(name):
		uid, _ := strconv.ParseUint(name, 10, 32)
		u.uid, u.gid = uint32(uid), uint32(uid)
	case name == "root":
		u.home = "/root"
	default:
		return user{}, fmt.Errorf("user %s not found in the image's /etc/passwd", name)
	}
	if hasGroup {
		if g, ok := findEntry(rootFD, "/etc/group", group, 2); ok {
			gid, err := strconv.ParseUint(g[2], 10, 32)
			if err != nil {
				return user{}, fmt.Errorf("group %s: malformed /etc/group entry", group)
			}
			u.gid = uint32(gid)
		} else if isNumber(group) {
			gid, _ := strconv.ParseUint(group, 10, 32)
			u.gid = uint32(gid)
		} else {
			return user{}, fmt.Errorf("group %s not found in the image's /etc/group", group)
		}
	}
	if u.groups = groups; u.groups == nil {
		u.groups = supplementaryGroups(rootFD, u.name, u.gid)
	}
	return u, nil
}

// maxAccountFile bounds what is read of an image's /etc/passwd or
// /etc/group: the image is not trusted to keep them small.
const maxAccountFile = 16 << 20

// rootFile opens the regular file name of the root for reading, or
// returns nil: missing, not a regular file (a FIFO there must not hang
// the command's start) or unreadable are all "no such file" to callers.
func rootFile(rootFD int, name string) *os.File {
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
	f := rootFile(rootFD, name)
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

func isNumber(s string) bool {
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// defaultPath is the PATH of a command whose environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// defaultEnv completes a command's environment: PATH, HOME and, on a
// terminal, TERM, unless the image or the user set them.
func defaultEnv(env []string, u user, tty bool) []string {
	out := append([]string(nil), env...)
	add := func(k, v string) {
		if envValue(out, k) == "" {
			out = append(out, k+"="+v)
		}
	}
	add("PATH", defaultPath)
	add("HOME", u.home)
	if tty {
		add("TERM", "xterm")
	}
	return out
}

// envValue returns the last value of key in env (later entries win).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// lookPath finds an executable the way a shell does, in the command's own
// PATH (not the agent's).
func lookPath(file, path, dir string, rootFD int) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(rootFD, p); err != nil {
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
		if executable(rootFD, p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", file)
}

// executable says whether p is a file the command can execute.
func executable(rootFD int, p string) error {
	st, err := statIn(rootFD, p)
	if err != nil {
		return fmt.Errorf("no such file")
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// isDirIn says whether p is a directory of the root.
func isDirIn(rootFD int, p string) bool {
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
