package ext4fs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var mtime = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

func newWriter(t *testing.T, maxBytes int64) (*Writer, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fs.ext4")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w, err := New(f, Options{MaxBytes: maxBytes, Label: "test", Spare: 1 << 20, Now: mtime, UUID: [16]byte{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	return w, p
}

func file(t *testing.T, w *Writer, parent *Node, name string, perm, uid, gid uint32, r io.Reader) *Node {
	t.Helper()
	n := &Node{Mode: TypeReg | perm, UID: uid, GID: gid, Mtime: mtime}
	if _, err := w.WriteData(n, r); err != nil {
		t.Fatal(err)
	}
	parent.Children[name] = n
	return n
}

func finish(t *testing.T, w *Writer, p string) Stats {
	t.Helper()
	st, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	fsck(t, p)
	return st
}

// fsck runs e2fsck read-only and forced: a clean image exits 0.
func fsck(t *testing.T, p string) {
	t.Helper()
	if _, err := exec.LookPath("e2fsck"); err != nil {
		t.Skip("e2fsck not installed (e2fsprogs)")
	}
	out, err := exec.Command("e2fsck", "-fn", p).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
}

// debugfs asks e2fsprogs' own reader (read-only; paths chosen by the test).
func debugfs(t *testing.T, img, req string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", req, img).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs -R %q: %v: %s", req, err, out)
	}
	return string(out)
}

func TestTreeRoundTripsThroughE2fsprogs(t *testing.T) {
	w, p := newWriter(t, 1<<30)
	root := w.Root()
	etc := NewDir(0o755, 0, 0, mtime)
	root.Children["etc"] = etc
	file(t, w, etc, "hostname", 0o644, 0, 0, strings.NewReader("smol\n"))
	su := file(t, w, root, "su", 0o4755, 0, 0, strings.NewReader("#!/bin/su"))
	root.Children["su-link"] = su
	file(t, w, root, "empty", 0o600, 1000, 1000, strings.NewReader(""))
	big := strings.Repeat("0123456789abcdef", 70000) // 1.1 MB, crosses the 1 MiB buffer
	file(t, w, root, "big", 0o644, 0, 0, strings.NewReader(big))
	file(t, w, root, "zeros", 0o644, 0, 0, bytes.NewReader(make([]byte, 3*BlockSize+7)))
	root.Children["short"] = &Node{Mode: TypeSymlink | 0o777, Link: "/etc/hostname", Mtime: mtime}
	long := "/" + strings.Repeat("long/", 30) + "target"
	root.Children["long"] = &Node{Mode: TypeSymlink | 0o777, Link: long, UID: 5, GID: 6, Mtime: mtime}
	dev := NewDir(0o755, 0, 0, mtime)
	root.Children["dev"] = dev
	dev.Children["null"] = &Node{Mode: TypeChar | 0o666, Major: 1, Minor: 3, Mtime: mtime}
	dev.Children["sda"] = &Node{Mode: TypeBlock | 0o660, GID: 6, Major: 8, Minor: 0, Mtime: mtime}
	dev.Children["big"] = &Node{Mode: TypeChar | 0o600, Major: 300, Minor: 70000, Mtime: mtime}
	dev.Children["fifo"] = &Node{Mode: TypeFifo | 0o600, Mtime: mtime}
	tmp := NewDir(0o1777, 0, 0, mtime)
	root.Children["tmp"] = tmp
	home := NewDir(0o500, 100000, 100000, mtime)
	root.Children["home"] = home
	capf := file(t, w, root, "cap", 0o755, 0, 0, strings.NewReader("c"))
	capf.Xattrs = []Xattr{{"user.smol", []byte("hello")}, {"security.capability", []byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}}
	bigx := file(t, w, root, "bigx", 0o644, 0, 0, strings.NewReader("x"))
	bigx.Xattrs = []Xattr{{"user.a", bytes.Repeat([]byte("v"), 1000)}, {"trusted.b", []byte("w")}}
	acl := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range [][3]uint32{{aclUserObj, 7, 0xffffffff}, {aclUser, 5, 1000}, {aclGroupObj, 5, 0xffffffff}, {aclMask, 5, 0xffffffff}, {aclOther, 0, 0xffffffff}} {
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[0]))
		acl = binary.LittleEndian.AppendUint16(acl, uint16(e[1]))
		acl = binary.LittleEndian.AppendUint32(acl, e[2])
	}
	tmp.Xattrs = []Xattr{{"system.posix_acl_access", acl}}
	many := NewDir(0o755, 0, 0, mtime)
	root.Children["many"] = many
	for i := 0; i < 500; i++ { // several directory blocks
		many.Children[fmt.Sprintf("file-with-a-longish-name-%04d", i)] = &Node{Mode: TypeFifo | 0o644, Mtime: mtime}
	}

	st := finish(t, w, p)
	if st.Inodes < 520 {
		t.Errorf("Stats.Inodes = %d", st.Inodes)
	}
	for path, want := range map[string]string{"/etc/hostname": "smol\n", "/su": "#!/bin/su", "/big": big, "/empty": ""} {
		if got := debugfs(t, p, "cat "+path); got != want && !strings.HasSuffix(got, "\n"+want) {
			t.Errorf("%s: %d bytes, want %d", path, len(got), len(want))
		}
	}
	if got := debugfs(t, p, "cat /zeros"); !strings.HasSuffix(got, string(make([]byte, 3*BlockSize+7))) {
		t.Errorf("/zeros: %d bytes", len(got))
	}
	checks := map[string][]string{
		"stat /su":              {"Mode:  04755", "Links: 2", "Type: regular"},
		"stat /empty":           {"User:  1000", "Group:  1000", "Mode:  0600"},
		"stat /short":           {"Fast link dest: \"/etc/hostname\""},
		"stat /long":            {"Type: symlink", "User:     5"},
		"stat /dev/null":        {"Type: character special", "Device major/minor number: 01:03"},
		"stat /dev/sda":         {"Type: block special", "Group:     6", "Mode:  0660"},
		"stat /dev/big":         {"Device major/minor number: 300:70000"},
		"stat /dev/fifo":        {"Type: FIFO"},
		"stat /tmp":             {"Mode:  01777"},
		"stat /home":            {"User: 100000", "Mode:  0500"},
		"ea_get /cap user.smol": {"hello"},
		"ea_list /bigx":         {"user.a (1000)", "trusted.b (1) = \"w\""},
		"ea_list /cap":          {"security.capability (20)"},
		"ea_list /tmp":          {"system.posix_acl_access"},
		"stat /etc":             {"Inode: ", "ctime: 0x663881d9:1d6f3454 -- Mon May  6 07:08:09 2024"},
		"stat /lost+found":      {"Mode:  0700"},
	}
	for req, wants := range checks {
		out := debugfs(t, p, req)
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in:\n%s", req, want, out)
			}
		}
	}
	if got := debugfs(t, p, "cat /long"); !strings.Contains(got, long) && debugfs(t, p, "stat /long") == "" {
		t.Errorf("long link")
	}
	if out := debugfs(t, p, "ls -l /many"); strings.Count(out, "file-with-a-longish-name-") != 500 {
		t.Errorf("/many lists %d entries", strings.Count(out, "file-with-a-longish-name-"))
	}
}

// A file over four extents (512 MiB) needs an extent leaf block; zeros
// make it cheap, being holes in the image file.
func TestLargeFileUsesExtentLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 600 MiB of zeros")
	}
	w, p := newWriter(t, 1<<30)
	n := file(t, w, w.Root(), "huge", 0o644, 0, 0, io.LimitReader(zeroReader{}, 600<<20))
	file(t, w, w.Root(), "after", 0o644, 0, 0, strings.NewReader("after"))
	finish(t, w, p)
	if len(n.leaves) != 1 {
		t.Errorf("%d leaves", len(n.leaves))
	}
	if out := debugfs(t, p, "stat /huge"); !strings.Contains(out, "Size: 629145600") {
		t.Errorf("stat /huge:\n%s", out)
	}
	if got := debugfs(t, p, "cat /after"); !strings.HasSuffix(got, "after") {
		t.Errorf("/after = %q", got)
	}
	fi, _ := os.Stat(p)
	var st = fi.Sys().(interface{})
	_ = st
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Blocks of a node that was replaced are free in the image and holes in
// the file.
func TestReplacedDataIsFreedAndPunched(t *testing.T) {
	w, p := newWriter(t, 1<<30)
	payload := bytes.Repeat([]byte{0xAB}, 8<<20)
	file(t, w, w.Root(), "old", 0o644, 0, 0, bytes.NewReader(payload))
	file(t, w, w.Root(), "old", 0o644, 0, 0, strings.NewReader("new")) // replaces the node
	finish(t, w, p)
	var st syscallStat
	if err := statBlocks(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.allocated > 2<<20 {
		t.Errorf("image file holds %d bytes on disk; the replaced 8 MiB should be punched out", st.allocated)
	}
	if got := debugfs(t, p, "cat /old"); !strings.HasSuffix(got, "new") {
		t.Errorf("/old = %q", got)
	}
}

func TestBadXattrsAreRefused(t *testing.T) {
	for _, x := range []Xattr{
		{"user.x\n!id > /tmp/pwned", nil}, // fine for ext4: the name is only bytes
		{strings.Repeat("a", 300), nil},
		{"user." + strings.Repeat("n", 8192), nil},
		{"user.", nil},
		{"nonamespace", nil},
		{"system.posix_acl_access", []byte("garbage")},
		{"user.big", make([]byte, 5000)},
	} {
		err := CheckXattrs([]Xattr{x})
		if strings.HasPrefix(x.Name, "user.x\n") {
			if err != nil {
				t.Errorf("%q refused: %v", x.Name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("xattr %.40q accepted", x.Name)
		} else if len(err.Error()) > 300 {
			t.Errorf("error for %.40q is %d bytes long", x.Name, len(err.Error()))
		}
	}
}

func TestDirectoryLinkedTwiceIsRefused(t *testing.T) {
	w, _ := newWriter(t, 1<<20)
	d := NewDir(0o755, 0, 0, mtime)
	w.Root().Children["a"] = d
	w.Root().Children["b"] = d
	if _, err := w.Finish(); err == nil {
		t.Fatal("a directory under two names was written")
	}
}
