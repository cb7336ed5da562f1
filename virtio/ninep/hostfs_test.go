package ninep

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hugelgupf/p9/p9"
	"golang.org/x/sys/unix"
)

// serve starts the 9P server on a tree of dir and returns a client's root,
// speaking the real protocol over a socket pair, as the guest would.
func serve(t *testing.T, dir string, readOnly bool) p9.File {
	t.Helper()
	tr, err := newTree(dir, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	go p9.NewServer(tr).Handle(a, a)
	c, err := p9.NewClient(b, p9.WithMessageSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); tr.root.Close() })
	root, err := c.Attach("")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func walk(t *testing.T, f p9.File, path ...string) (p9.File, error) {
	t.Helper()
	_, g, err := f.Walk(path)
	return g, err
}

// TestTreeReadsAndWritesBothWays: files the host made read in the guest,
// files the guest makes land on the host, with their contents.
func TestTreeReadsAndWritesBothWays(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "host.txt"), []byte("from the host"), 0o644)
	root := serve(t, dir, false)

	f, err := walk(t, root, "sub", "host.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, err := f.ReadAt(buf, 0)
	if err != nil || string(buf[:n]) != "from the host" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	sub, _ := walk(t, root, "sub")
	clone, _ := walk(t, sub) // Tlcreate turns its fid into the new file, as Linux's client expects
	nf, _, _, err := clone.Create("guest.txt", p9.ReadWrite, 0o640, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789"), 10000)
	for off := 0; off < len(data); off += 30000 {
		if _, err := nf.WriteAt(data[off:min(off+30000, len(data))], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	nf.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "guest.txt")); !bytes.Equal(b, data) {
		t.Fatalf("the host reads %d bytes of the guest's %d", len(b), len(data))
	}
	if _, err := sub.Mkdir("d", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := sub.RenameAt("guest.txt", root, "moved.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "moved.txt")); err != nil {
		t.Errorf("rename: %v", err)
	}
	if err := root.UnlinkAt("moved.txt", 0); err != nil {
		t.Fatal(err)
	}
}

// TestTreeHoldsTheGuestIn: whatever the guest makes or names inside the
// tree, the host never reaches outside it, never opens a device, and a
// read-only tree changes nothing.
func TestTreeHoldsTheGuestIn(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), []byte("inside"), 0o644)
	root := serve(t, dir, false)

	for _, names := range [][]string{{".."}, {"..", filepath.Base(outside)}, {"/etc"}, {"a/b"}, {""}} {
		if _, err := walk(t, root, names...); err == nil {
			t.Errorf("walk %q left the tree", names)
		}
	}
	// Symlinks the guest makes are its own: the host never follows them.
	for name, target := range map[string]string{"abs": filepath.Join(outside, "secret"), "rel": "../" + filepath.Base(outside) + "/secret", "self": "."} {
		if _, err := root.Symlink(target, name, 0, 0); err != nil {
			t.Fatal(err)
		}
		l, err := walk(t, root, name)
		if err != nil {
			t.Fatalf("walk to the symlink %s: %v", name, err)
		}
		if got, err := l.Readlink(); err != nil || got != target {
			t.Errorf("readlink %s: %q %v", name, got, err)
		}
		if _, _, err := l.Open(p9.ReadOnly); err == nil {
			t.Errorf("the host opened through the symlink %s", name)
		}
		if _, err := walk(t, root, name, "secret"); err == nil {
			t.Errorf("a walk through the symlink %s", name)
		}
	}
	// A hard link only to files of the tree.
	f, _ := walk(t, root, "file")
	if err := root.Link(f, "file2"); err != nil {
		t.Errorf("a hard link inside the tree: %v", err)
	}
	abs, _ := walk(t, root, "abs")
	if err := root.Link(abs, "link-to-link"); err == nil {
		if b, err := os.Readlink(filepath.Join(dir, "link-to-link")); err != nil || strings.Contains(string(b), "host secret") {
			t.Errorf("a hard link through a symlink reached %q", b)
		}
	}
	// No device nodes, FIFOs or sockets.
	if _, err := root.Mknod("null", p9.ModeCharacterDevice|0o666, 1, 3, 0, 0); err == nil {
		t.Error("mknod of a device")
	}
	if _, err := root.Mknod("fifo", p9.ModeNamedPipe|0o666, 0, 0, 0, 0); err == nil {
		t.Error("mknod of a FIFO")
	}
	if err := unix.Mkfifo(filepath.Join(dir, "hostfifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	ff, _ := walk(t, root, "hostfifo")
	if _, _, err := ff.Open(p9.ReadOnly); err == nil {
		t.Error("the host opened a FIFO for the guest")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host secret" {
		t.Error("the outside changed")
	}

	// Read-only: every change refused.
	ro := serve(t, dir, true)
	rf, _ := walk(t, ro, "file")
	if _, _, err := rf.Open(p9.ReadWrite); err == nil {
		t.Error("a read-only tree opened a file for writing")
	}
	roClone, _ := walk(t, ro)
	if _, _, _, err := roClone.Create("new", p9.ReadWrite, 0o644, 0, 0); err == nil {
		t.Error("a read-only tree created a file")
	}
	if _, err := ro.Mkdir("newdir", 0o755, 0, 0); err == nil {
		t.Error("a read-only tree made a directory")
	}
	if err := ro.UnlinkAt("file", 0); err == nil {
		t.Error("a read-only tree removed a file")
	}
	if err := rf.SetAttr(p9.SetAttrMask{Size: true}, p9.SetAttr{Size: 0}); err == nil {
		t.Error("a read-only tree truncated a file")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "file")); string(b) != "inside" {
		t.Errorf("the read-only tree's file reads %q", b)
	}
}

// TestTreeListsManyFiles: a directory of 10,000 entries lists whole, each
// once, across the guest's repeated reads.
func TestTreeListsManyFiles(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 10000; i++ {
		os.WriteFile(filepath.Join(dir, "f"+strings.Repeat("x", i%7)+"-"+strconv.Itoa(i)), nil, 0o644)
	}
	root := serve(t, dir, false)
	d, _ := walk(t, root)
	if _, _, err := d.Open(p9.ReadOnly); err != nil {
		t.Fatal(err)
	}
	var names []string
	for off := uint64(0); ; {
		ents, err := d.Readdir(off, 32<<10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			names = append(names, e.Name)
			off = e.Offset
		}
	}
	sort.Strings(names)
	if len(names) != 10000 {
		t.Fatalf("listed %d entries", len(names))
	}
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			t.Fatalf("%s listed twice", names[i])
		}
	}
}

// TestTreeMakesNoSetuidFiles: whatever mode the guest asks for, a file
// or directory on the host never gets the setuid or setgid bit (the VMM
// may run as root: such a file would be a way up for the host's users).
// The server refuses such a mode or drops the bits.
func TestTreeMakesNoSetuidFiles(t *testing.T) {
	dir := t.TempDir()
	root := serve(t, dir, false)
	if err := os.WriteFile(filepath.Join(dir, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := walk(t, root, "old")
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[string]error{}
	_, _, _, attempts["made"] = root.Create("made", p9.WriteOnly, 0o6755, 0, 0)
	_, attempts["dir"] = root.Mkdir("dir", 0o3777, 0, 0)
	attempts["old"] = old.SetAttr(p9.SetAttrMask{Permissions: true}, p9.SetAttr{Permissions: 0o6755})
	for name, err := range attempts {
		fi, statErr := os.Stat(filepath.Join(dir, name))
		if err != nil && name != "old" {
			if statErr == nil {
				t.Errorf("%s: refused (%v) but made", name, err)
			}
			continue
		}
		if statErr != nil {
			t.Fatal(statErr)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s: mode %v on the host", name, fi.Mode())
		}
		t.Logf("%s: %v, host mode %v", name, err, fi.Mode())
	}
}

// TestTreeDescriptorsCloseOnExec: every descriptor a fid holds is
// close-on-exec (the root's, a clone's, a walked one's), so no program the
// VMM starts inherits the share.
func TestTreeDescriptorsCloseOnExec(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := newTree(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.root.Close()
	root, err := tr.Attach()
	if err != nil {
		t.Fatal(err)
	}
	_, clone, err := root.Walk(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, sub, err := root.Walk([]string{"sub"})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]p9.File{"root": root, "clone": clone, "sub": sub} {
		flags, err := unix.FcntlInt(uintptr(f.(*file).fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("the %s fid's descriptor: flags %#x, %v; want close-on-exec", name, flags, err)
		}
		f.Close()
	}
}
