package imagefs

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol/imagefs/ext4fs"
)

// FuzzApplyLayer feeds arbitrary layer streams, applied twice (so that
// whiteouts and replacements meet earlier content), to the unpacker and
// the ext4 writer. It asserts: no panic; Finish never fails on a tree the
// unpacker built (it refuses directories linked twice and bad names);
// every name in the tree is a valid ext4 name; and nothing but the image
// file is created on the host.
func FuzzApplyLayer(f *testing.F) {
	seeds := [][]ent{
		{dir("etc/"), file("etc/a", "A"), symlink("l", "/etc"), file("l/b", "B"), hardlink("h", "etc/a")},
		{file(".wh.etc", ""), file("x/.wh..wh..opq", ""), file("x/y", "y")},
		{symlink("loop", "loop"), file("loop/x", "x"), symlink("up", "../../.."), file("up/escape", "e")},
		{ent{Name: "f", Body: "x", Xattrs: map[string]string{"user.a": "1", "security.capability": "cap", "bogus": "x"}}},
		{ent{Name: "d", Type: tar.TypeChar, Major: 1, Minor: 3}, ent{Name: "p", Type: tar.TypeFifo}, hardlink("d2", "d")},
		{dir("a/"), hardlink("a/h", "a"), file("a", "now a file"), file("a/b", "under a file")},
	}
	for _, s := range seeds {
		b, err := imagetestTar(s...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("not a tar stream"))
	f.Fuzz(func(t *testing.T, layer []byte) {
		dir := t.TempDir()
		img := filepath.Join(dir, "img")
		fp, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer fp.Close()
		w, err := ext4fs.New(fp, ext4fs.Options{MaxBytes: 64 << 20, Now: time.Unix(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		u := newUnpacker(w, Limits{MaxBytes: 16 << 20, MaxEntries: 5000}, nil)
		u.applyLayer(bytes.NewReader(layer))
		u.applyLayer(bytes.NewReader(layer))
		if _, err := w.Finish(); err != nil {
			t.Fatalf("Finish on an unpacked tree: %v", err)
		}
		checkTree(t, w.Root(), 0)
		des, _ := os.ReadDir(dir)
		if len(des) != 1 {
			t.Fatalf("the host holds %v", des)
		}
	})
}

func checkTree(t *testing.T, n *ext4fs.Node, depth int) {
	for name, c := range n.Children {
		if name == "" || name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, "/\x00") {
			t.Fatalf("bad name %q in the tree", name)
		}
		if c.IsDir() && depth < 512 {
			checkTree(t, c, depth+1)
		}
	}
}

func imagetestTar(ents ...ent) ([]byte, error) { return rawTar(ents...) }
