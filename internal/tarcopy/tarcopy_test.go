package tarcopy

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPackUnpackKeepsTreeModesAndTimes(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o755)
	os.WriteFile(filepath.Join(src, "a"), bytes.Repeat([]byte("A"), 3<<20), 0o640)
	os.WriteFile(filepath.Join(src, "sub", "x.sh"), []byte("#!/bin/sh"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "deep", "f"), []byte("deep"), 0o600)
	os.Symlink("../a", filepath.Join(src, "sub", "link"))
	os.Chmod(filepath.Join(src, "sub", "deep"), 0o500)
	mt := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	os.Chtimes(filepath.Join(src, "a"), mt, mt)
	os.Chtimes(filepath.Join(src, "sub"), mt, mt)
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "sub", "deep"), 0o755) })

	var stream bytes.Buffer
	if err := Pack(&stream, src, "tree"); err != nil {
		t.Fatal(err)
	}
	for _, rn := range []string{"", "renamed"} {
		dst := t.TempDir()
		if err := Unpack(bytes.NewReader(stream.Bytes()), dst, Options{Rename: rn, Hostile: true}); err != nil {
			t.Fatal(err)
		}
		top := filepath.Join(dst, "tree")
		if rn != "" {
			top = filepath.Join(dst, rn)
		}
		t.Cleanup(func() { os.Chmod(filepath.Join(top, "sub", "deep"), 0o755) })
		for p, want := range map[string]os.FileMode{"a": 0o640, "sub/x.sh": 0o755, "sub/deep/f": 0o600, "sub/deep": 0o500 | os.ModeDir} {
			fi, err := os.Lstat(filepath.Join(top, p))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != want {
				t.Errorf("%s: %v, want %v", p, fi.Mode(), want)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(top, "a")); len(b) != 3<<20 {
			t.Errorf("a has %d bytes", len(b))
		}
		if l, _ := os.Readlink(filepath.Join(top, "sub", "link")); l != "../a" {
			t.Errorf("link -> %q", l)
		}
		for _, p := range []string{"a", "sub"} {
			if fi, _ := os.Stat(filepath.Join(top, p)); !fi.ModTime().Equal(mt) {
				t.Errorf("%s mtime %v", p, fi.ModTime())
			}
		}
	}
}

func TestTarget(t *testing.T) {
	d := t.TempDir()
	if dir, rn, err := Target(d); dir != d || rn != "" || err != nil {
		t.Errorf("existing dir: %q %q %v", dir, rn, err)
	}
	if dir, rn, err := Target(filepath.Join(d, "new")); dir != d || rn != "new" || err != nil {
		t.Errorf("new name: %q %q %v", dir, rn, err)
	}
	if _, _, err := Target(filepath.Join(d, "no", "such")); err == nil {
		t.Error("missing parent accepted")
	}
}

type member struct {
	name, link, body string
	typ              byte
	mode             int64
}

func stream(t *testing.T, ms ...member) *bytes.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: m.mode, Size: int64(len(m.body))}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		tw.WriteHeader(h)
		tw.Write([]byte(m.body))
	}
	tw.Close()
	return bytes.NewReader(b.Bytes())
}

// A hostile guest's stream stays inside the destination and brings no
// privilege along.
func TestHostileStreamsStayInside(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("keep"), 0o600)
	cases := map[string][]member{
		"dotdot":         {{name: "t/", typ: tar.TypeDir}, {name: "t/../../escape", body: "x", typ: tar.TypeReg}},
		"symlink out":    {{name: "t/", typ: tar.TypeDir}, {name: "t/l", link: outside, typ: tar.TypeSymlink}, {name: "t/l/secret", body: "overwritten", typ: tar.TypeReg}},
		"hardlink out":   {{name: "t/", typ: tar.TypeDir}, {name: "t/h", link: filepath.Join(outside, "secret"), typ: tar.TypeLink}},
		"device":         {{name: "t/", typ: tar.TypeDir}, {name: "t/sda", typ: tar.TypeBlock}},
		"other top":      {{name: "t/", typ: tar.TypeDir}, {name: "u/x", body: "x", typ: tar.TypeReg}},
		"absolute names": {{name: "/t/", typ: tar.TypeDir}, {name: "/t/abs", body: "x", typ: tar.TypeReg}},
	}
	for name, ms := range cases {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			err := Unpack(stream(t, ms...), dst, Options{Hostile: true})
			t.Logf("err: %v", err)
			if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "keep" {
				t.Errorf("outside file changed: %q", b)
			}
			des, _ := os.ReadDir(outside)
			if len(des) != 1 {
				t.Errorf("outside holds %v", des)
			}
			if name == "absolute names" {
				if err != nil {
					t.Errorf("absolute names are cleaned, not refused: %v", err)
				} else if _, err := os.Stat(filepath.Join(dst, "t", "abs")); err != nil {
					t.Errorf("abs not inside: %v", err)
				}
			} else if err == nil {
				t.Errorf("accepted")
			}
		})
	}
	dst := t.TempDir()
	if err := Unpack(stream(t, member{name: "suid", body: "x", typ: tar.TypeReg, mode: 0o4755}), dst, Options{Hostile: true}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "suid")); fi.Mode() != 0o755 {
		t.Errorf("setuid from a hostile stream: %v", fi.Mode())
	}
}
