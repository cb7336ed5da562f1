package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// user is who a command runs as.
type user struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string
}

// lookupUser resolves an image's USER or -u value: "", NAME, UID,
// NAME:GROUP, UID:GID (and mixtures), from the root's /etc/passwd and
// /etc/group (of root, the command's root directory). A numeric user
// without a passwd entry is allowed, as Docker allows it.
func lookupUser(spec, root string) (user, error) {
	if spec == "" {
		spec = "root"
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	u := user{name: name, home: "/"}
	entry, found := findEntry(filepath.Join(root, "/etc/passwd"), name, 2)
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
		if g, ok := findEntry(filepath.Join(root, "/etc/group"), group, 2); ok {
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
	u.groups = supplementaryGroups(u.name, u.gid, root)
	return u, nil
}

// findEntry finds the line of a passwd-style file whose name (field 0) or
// numeric id (field idField) is key.
func findEntry(file, key string, idField int) ([]string, bool) {
	f, err := os.Open(file)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
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
func supplementaryGroups(name string, primary uint32, root string) []uint32 {
	groups := []uint32{primary}
	f, err := os.Open(filepath.Join(root, "/etc/group"))
	if err != nil {
		return groups
	}
	defer f.Close()
	s := bufio.NewScanner(f)
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
func lookPath(file, path, dir, root string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(filepath.Join(root, p)); err != nil {
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
		if executable(filepath.Join(root, p)) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", file)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("no such file")
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}
