package imagefs

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The ext4 image is made by mke2fs -d, which copies a directory tree into a
// new filesystem without mounting anything (so no root needed), keeping
// modes, owners, times, hardlinks, device nodes and xattrs of the tree.
// What the tree could not hold (owners and device nodes when not root,
// refused xattrs) is patched in afterwards with debugfs.

const (
	diskFile   = "rootfs.ext4"
	configFile = "config.json"
	markerFile = "complete"
	fsLabel    = "smolroot"
	blockSize  = 4096
	inodeSize  = 256
)

var (
	toolsOnce sync.Once
	mke2fsBin string
	debugfsBn string
	toolsErr  error
)

// findTools locates mke2fs and debugfs (PATH, then /sbin and /usr/sbin,
// which are often missing from a user's PATH) and checks that mke2fs is new
// enough for -d.
func findTools() (string, string, error) {
	toolsOnce.Do(func() {
		if mke2fsBin, toolsErr = findTool("mke2fs"); toolsErr != nil {
			return
		}
		if debugfsBn, toolsErr = findTool("debugfs"); toolsErr != nil {
			return
		}
		toolsErr = checkMke2fsVersion(mke2fsBin)
	})
	return mke2fsBin, debugfsBn, toolsErr
}

func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/sbin", "/usr/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (install e2fsprogs ≥ 1.43)", name)
}

var versionRE = regexp.MustCompile(`mke2fs (\d+)\.(\d+)`)

func checkMke2fsVersion(bin string) error {
	out, _ := exec.Command(bin, "-V").CombinedOutput()
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("cannot tell the version of %s: %q", bin, bytes.TrimSpace(out))
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	if major < 1 || (major == 1 && minor < 43) {
		return fmt.Errorf("%s is e2fsprogs %d.%d; need ≥ 1.43 for mke2fs -d", bin, major, minor)
	}
	return nil
}

// treeStats sums what the staging tree will need in ext4.
type treeStats struct {
	bytes  int64 // data, in whole blocks, counting each inode once
	inodes int
}

// fsGeometry sizes the image: content × 1.3 plus 64 MiB, so the per-run
// writable copy has room to grow, plus the inode tables. There are enough
// inodes for the content half again, and at least 16384 spare.
func fsGeometry(st treeStats) (size int64, inodes int) {
	inodes = st.inodes + st.inodes/2 + 16384
	size = st.bytes*13/10 + 64<<20 + int64(inodes)*inodeSize
	if min := size / 32768; int64(inodes) < min { // keep a sane ratio for big images
		inodes = int(min)
		size += int64(inodes-st.inodes) * inodeSize
	}
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	return size, inodes
}

// scan walks the finished staging tree, sums its size and lists the
// debugfs commands that make the ext4 image match what the layers asked
// for. Values of xattrs go to files in scratch (debugfs reads them with -f).
func (u *unpacker) scan(scratch string) (treeStats, []string, error) {
	var st treeStats
	var cmds []string
	seenIno := map[uint64]bool{}
	nx := 0
	err := filepath.WalkDir(u.rootPath, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sys := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(u.rootPath, p)
		if rel == "." {
			rel = ""
		}
		if sys.Nlink > 1 && !fi.IsDir() {
			if seenIno[sys.Ino] {
				return nil
			}
			seenIno[sys.Ino] = true
		}
		st.inodes++
		st.bytes += (fi.Size() + blockSize - 1) &^ (blockSize - 1)
		m := u.meta[rel]
		if m == nil {
			m = &fileMeta{mode: uint32(sys.Mode) & 0o7777}
		}
		dpath := "/" + rel
		if strings.ContainsAny(dpath, "\n\r") {
			if u.needsFix(sys, m, rel == "") {
				u.note("cannot set owner/mode of %q in the ext4 image: newline in name", rel)
			}
			return nil
		}
		q := debugfsQuote(dpath)
		if m.dev != nil && sys.Mode&unix.S_IFMT == unix.S_IFREG {
			typ := uint32(unix.S_IFCHR)
			if m.dev.kind == 'b' {
				typ = unix.S_IFBLK
			}
			dir, base := filepath.Split(dpath)
			cmds = append(cmds,
				"rm "+q,
				"cd "+debugfsQuote(dir),
				fmt.Sprintf("mknod %s %c %d %d", debugfsQuote(base), m.dev.kind, m.dev.major, m.dev.minor),
				"cd /",
				fmt.Sprintf("sif %s mode 0%o", q, typ|m.mode),
				fmt.Sprintf("sif %s uid %d", q, m.uid),
				fmt.Sprintf("sif %s gid %d", q, m.gid))
			return nil
		}
		// mke2fs -E root_owner=0:0 decides the root's owner, not the tree.
		if int(sys.Uid) != m.uid || (rel == "" && m.uid != 0) {
			cmds = append(cmds, fmt.Sprintf("sif %s uid %d", q, m.uid))
		}
		if int(sys.Gid) != m.gid || (rel == "" && m.gid != 0) {
			cmds = append(cmds, fmt.Sprintf("sif %s gid %d", q, m.gid))
		}
		if sys.Mode&unix.S_IFMT != unix.S_IFLNK && sys.Mode&0o7777 != m.mode {
			cmds = append(cmds, fmt.Sprintf("sif %s mode 0%o", q, sys.Mode&unix.S_IFMT|m.mode))
		}
		for k, v := range m.xattrs {
			nx++
			vf := filepath.Join(scratch, fmt.Sprintf("xattr-%d", nx))
			if err := os.WriteFile(vf, []byte(v), 0o600); err != nil {
				return err
			}
			cmds = append(cmds, fmt.Sprintf("ea_set -f %s %s %s", debugfsQuote(vf), q, debugfsQuote(k)))
		}
		return nil
	})
	return st, cmds, err
}

func (u *unpacker) needsFix(sys *syscall.Stat_t, m *fileMeta, root bool) bool {
	return int(sys.Uid) != m.uid || int(sys.Gid) != m.gid || sys.Mode&0o7777 != m.mode || m.dev != nil || len(m.xattrs) > 0 || root
}

// debugfsQuote quotes an argument for debugfs's command parser, where a
// doubled quote inside quotes stands for one and backslash is literal.
func debugfsQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// makeExt4 creates the image at out from the staging tree.
func makeExt4(ctx context.Context, staging, out string, st treeStats) error {
	mke2fs, _, err := findTools()
	if err != nil {
		return err
	}
	size, inodes := fsGeometry(st)
	f, err := os.OpenFile(out, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, mke2fs, "-q", "-F",
		"-t", "ext4",
		"-b", strconv.Itoa(blockSize),
		"-I", strconv.Itoa(inodeSize),
		"-N", strconv.Itoa(inodes),
		"-m", "0",
		"-L", fsLabel,
		"-O", "^has_journal", // the base image is never written in place; a journal only costs space and time
		"-E", "root_owner=0:0,nodiscard",
		"-d", staging,
		out, strconv.FormatInt(size/1024, 10)+"k")
	if b, err := cmd.CombinedOutput(); err != nil {
		return toolError("mke2fs", err, b, filepath.Dir(out))
	}
	return nil
}

// toolError turns a failed tool's output into one line: the user sees
// "no space left" plainly, and other messages joined, never a block of
// text.
func toolError(tool string, err error, output []byte, dir string) error {
	text := strings.TrimSpace(string(output))
	if strings.Contains(text, "No space left on device") {
		return fmt.Errorf("%s: no space left on device under %s", tool, dir)
	}
	lines := strings.Split(text, "\n")
	if len(lines) > 3 {
		lines = append(lines[:3], "...")
	}
	return fmt.Errorf("%s: %v: %s", tool, err, strings.Join(lines, "; "))
}

// runDebugfs applies cmds to img. debugfs exits 0 even when commands fail,
// so anything it prints on stderr besides its banner counts as failure.
func runDebugfs(ctx context.Context, img string, cmds []string, scratch string) error {
	_, debugfs, err := findTools()
	if err != nil {
		return err
	}
	script := filepath.Join(scratch, "debugfs.cmds")
	if err := os.WriteFile(script, []byte(strings.Join(cmds, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, debugfs, "-w", "-f", script, img)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return toolError("debugfs", err, stderr.Bytes(), filepath.Dir(img))
	}
	var bad []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "debugfs ") || strings.HasPrefix(l, "Allocated inode") {
			continue
		}
		bad = append(bad, l)
	}
	if len(bad) > 0 {
		if len(bad) > 5 {
			bad = append(bad[:5], fmt.Sprintf("… and %d more", len(bad)-5))
		}
		return fmt.Errorf("debugfs: %s", strings.Join(bad, "; "))
	}
	return nil
}
