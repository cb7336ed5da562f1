// Package mountinfo detaches the mounts below a directory, as this
// process's /proc/self/mountinfo lists them, so the tree can be removed.
package mountinfo

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DetachAllUnder detaches every mount at or below dir, deepest first: a
// tree about to be removed must not reach, through a volume still mounted
// in it, into the directory the volume is, and a directory with a mount
// in it cannot be removed at all.
func DetachAllUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		// The fifth field is the mount point, with space, tab, newline
		// and backslash escaped in octal.
		if f := strings.Fields(line); len(f) > 4 {
			if p := Unescape(f[4]); p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	for i := len(points) - 1; i >= 0; i-- { // mountinfo lists parents first
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return &os.PathError{Op: "unmount", Path: points[i], Err: err}
		}
	}
	return nil
}

// Unescape undoes mountinfo's \ooo escapes.
func Unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}
