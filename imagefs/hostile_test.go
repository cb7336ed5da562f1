package imagefs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"
)

// Regression tests for hostile layers. Each names the attack it stops.

// pwnFile is where an injected shell command would leave its mark.
func pwnFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "pwned")
	t.Cleanup(func() {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a command from the image ran on the host: %s exists", p)
		}
	})
	return p
}

// An xattr name with a newline and debugfs's shell escape used to run
// "id > FILE" on the host (the name reached a debugfs -f script). Now no
// byte of an image reaches any command language; the name is an ordinary
// (odd) name in the guest's filesystem.
func TestXattrNameWithNewlineRunsNothing(t *testing.T) {
	pwned := pwnFile(t)
	reg := newRegistry(t)
	s := openStore(t, t.TempDir())
	// In a namespace the kernel knows, the name is kept as it is.
	ref := reg.push(t, "test/evil-xattr:v1", image(t, "amd64", v1.Config{}, layer(t,
		ent{Name: "f", Body: "f", Mode: 0o644, Xattrs: map[string]string{"user.x\n!id > " + pwned + "\n": "v", "user.ok": "fine"}},
	)))
	img := get(t, s, ref, Options{})
	if out, _ := debugfs(t, img.Disk, "ea_list /f"); !strings.Contains(out, "user.ok") || !strings.Contains(out, "user.x") {
		t.Errorf("ea_list /f: %q", out)
	}
	// In none, setxattr failed on the old staging tree and the name went
	// to the debugfs script: now it is refused.
	ref = reg.push(t, "test/evil-xattr:v2", image(t, "amd64", v1.Config{}, layer(t,
		ent{Name: "f", Body: "f", Mode: 0o644, Xattrs: map[string]string{"bogus.x\n!id > " + pwned + "\n": "v"}},
	)))
	_, err := s.Get(context.Background(), ref, Options{})
	assertOneLine(t, err, `layer entry "f"`, "no namespace")
}

// A name longer than debugfs's line buffer did the same without a
// newline; now it is refused as the kernel would refuse it (255 bytes).
func TestLongXattrNameIsRefused(t *testing.T) {
	pwned := pwnFile(t)
	long := "user." + strings.Repeat("A", 8200) + "\n!id > " + pwned
	reg := newRegistry(t)
	ref := reg.push(t, "test/evil-long:v1", image(t, "amd64", v1.Config{}, layer(t,
		ent{Name: "f", Body: "f", Mode: 0o644, Xattrs: map[string]string{long: "v"}},
	)))
	s := openStore(t, t.TempDir())
	_, err := s.Get(context.Background(), ref, Options{})
	assertOneLine(t, err, `layer entry "f"`, "xattr name is")
	assertCacheEmpty(t, s)
}

func assertOneLine(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r\x1b") || len(msg) > 400 {
		t.Errorf("error is not one short line: %q", msg)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
}

// Every header is checked before it is applied; a bad one fails the pull
// naming the entry, and no entry is cached.
func TestInvalidEntriesFailThePull(t *testing.T) {
	cases := map[string]struct {
		e    ent
		want string
	}{
		"NUL in name":         {ent{Name: "a\x00b", Body: "x"}, "NUL"},
		"component too long":  {ent{Name: strings.Repeat("n", 256), Body: "x"}, "component of 256 bytes"},
		"path too long":       {ent{Name: strings.Repeat("d/", 2100) + "f", Body: "x"}, "at most 4096"},
		"empty symlink":       {ent{Name: "l", Type: tar.TypeSymlink}, "empty target"},
		"huge link target":    {ent{Name: "l", Type: tar.TypeSymlink, Link: strings.Repeat("t/", 2100)}, "link target is"},
		"device out of range": {ent{Name: "d", Type: tar.TypeChar, Major: 5000, Minor: 1}, "device number"},
		"unknown namespace":   {ent{Name: "f", Body: "x", Xattrs: map[string]string{"bogus.x": "v"}}, "no namespace"},
		"xattrs too large":    {ent{Name: "f", Body: "x", Xattrs: map[string]string{"user.a": strings.Repeat("v", 3000), "user.b": strings.Repeat("w", 3000)}}, "extended attributes take"},
		"bad ACL":             {ent{Name: "f", Body: "x", Xattrs: map[string]string{"system.posix_acl_access": "junk"}}, "POSIX ACL"},
		"unknown type":        {ent{Name: "v", Type: 'V'}, "unsupported tar entry type"},
	}
	reg := newRegistry(t)
	s := openStore(t, t.TempDir())
	i := 0
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			i++
			b, err := rawTar(ent{Name: "ok", Body: "fine", Mode: 0o644}, c.e)
			if err != nil {
				t.Skipf("archive/tar cannot write it: %v", err)
			}
			l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
			if err != nil {
				t.Fatal(err)
			}
			ref := reg.push(t, "test/invalid:v"+strings.ReplaceAll(name, " ", "-"), image(t, "amd64", v1.Config{}, l))
			_, err = s.Get(context.Background(), ref, Options{})
			assertOneLine(t, err, "layer entry", c.want)
			assertCacheEmpty(t, s)
		})
	}
}

// archive/tar's reader never yields a NUL in a name (it ends ustar
// fields and is refused in PAX records); checkPath refuses one anyway.
func TestCheckPathRefusesNUL(t *testing.T) {
	if err := checkPath("name", "a\x00b", maxPath); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("checkPath: %v", err)
	}
}

// rawTar writes entries with archive/tar directly, without the helpers'
// normalisation, so that a test can write what a hostile tool would.
func rawTar(ents ...ent) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Typeflag: typ, Name: e.Name, Linkname: e.Link, Mode: e.Mode, Size: int64(len(e.Body)),
			Devmajor: e.Major, Devminor: e.Minor, Format: tar.FormatPAX, ModTime: time.Unix(1, 0)}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		for k, v := range e.Xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(e.Body[:h.Size])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// zeroBomb is a gzip'd layer that unpacks to files×mib MiB of zeros
// under one name. Concatenated gzip members are one stream, so it is made
// of a few small members repeated: each entry is a member holding a tar
// header followed by mib members of 1 MiB of zeros; a member with the tar
// trailer ends it.
func zeroBomb(t *testing.T, files, mib int) v1.Layer {
	t.Helper()
	member := func(p []byte) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed)
		zw.Write(p)
		zw.Close()
		return b.Bytes()
	}
	var hb bytes.Buffer
	tw := tar.NewWriter(&hb)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zero", Mode: 0o644, Size: int64(mib) << 20}); err != nil {
		t.Fatal(err)
	}
	entry := append(member(hb.Bytes()), bytes.Repeat(member(make([]byte, 1<<20)), mib)...)
	blob := append(bytes.Repeat(entry, files), member(make([]byte, 1024))...)
	digest, _, _ := v1.SHA256(bytes.NewReader(blob))
	l, err := partial.CompressedToLayer(bombLayer{blob, digest})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// bombLayer is a compressed layer whose diff ID is made up, so that
// building the test image does not unpack 10 GiB to compute it (smol
// verifies a registry layer by its compressed digest).
type bombLayer struct {
	blob   []byte
	digest v1.Hash
}

func (b bombLayer) Digest() (v1.Hash, error)            { return b.digest, nil }
func (b bombLayer) DiffID() (v1.Hash, error)            { return b.digest, nil }
func (b bombLayer) Size() (int64, error)                { return int64(len(b.blob)), nil }
func (b bombLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (b bombLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.blob)), nil
}

// A layer of 10 GiB of zeros (10 MB compressed) against a 1 GiB limit
// fails within seconds and leaves nothing: no entry, no temporary file,
// no memory in /dev/shm.
func TestZeroBombStopsAtTheLimit(t *testing.T) {
	bomb := zeroBomb(t, 80, 128) // 10 GiB
	if sz, _ := bomb.Size(); sz > 64<<20 {
		t.Fatalf("bomb is %d bytes compressed", sz)
	}
	reg := newRegistry(t)
	ref := reg.push(t, "test/bomb:v1", image(t, "amd64", v1.Config{}, bomb))
	shmBefore := shmUsed(t)
	s := openStore(t, t.TempDir())
	start := time.Now()
	_, err := s.Get(context.Background(), ref, Options{Limits: Limits{MaxBytes: 1 << 30}})
	took := time.Since(start)
	var le *LimitError
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want a LimitError", err)
	}
	assertOneLine(t, err, "more than 1.0 GiB", "SMOL_MAX_IMAGE_SIZE")
	t.Logf("failed after %v: %v", took, err)
	if took > 30*time.Second {
		t.Errorf("took %v to fail", took)
	}
	assertCacheEmpty(t, s)
	assertNoTemporaries(t, s)
	if after := shmUsed(t); after > shmBefore+1<<20 {
		t.Errorf("/dev/shm grew from %d to %d bytes", shmBefore, after)
	}
	// The limit comes from the environment too, and a single header that
	// claims more than the limit fails before any byte is read.
	t.Setenv("SMOL_MAX_IMAGE_SIZE", "64M")
	_, err = s.Get(context.Background(), ref, Options{})
	assertOneLine(t, err, "more than 64.0 MiB")
}

func TestEntryLimit(t *testing.T) {
	var ents []ent
	for i := 0; i < 50; i++ {
		ents = append(ents, file("f"+strings.Repeat("x", i), ""))
	}
	reg := newRegistry(t)
	ref := reg.push(t, "test/many:v1", image(t, "amd64", v1.Config{}, layer(t, ents...)))
	s := openStore(t, t.TempDir())
	t.Setenv("SMOL_MAX_IMAGE_ENTRIES", "20")
	_, err := s.Get(context.Background(), ref, Options{})
	assertOneLine(t, err, "more than 20 entries", "SMOL_MAX_IMAGE_ENTRIES")
	assertCacheEmpty(t, s)
	t.Setenv("SMOL_MAX_IMAGE_ENTRIES", "lots")
	if _, err := s.Get(context.Background(), ref, Options{}); err == nil || !strings.Contains(err.Error(), "SMOL_MAX_IMAGE_ENTRIES") {
		t.Errorf("a bad SMOL_MAX_IMAGE_ENTRIES: %v", err)
	}
}

func shmUsed(t *testing.T) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		return 0
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

func assertNoTemporaries(t *testing.T, s *Store) {
	t.Helper()
	filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

// A setuid-root file, a block device and a file capability in a layer
// exist only inside the ext4 image: while the image is being built, the
// host holds nothing of the layer but the (private) image file itself.
func TestNothingOfTheImageLandsOnTheHost(t *testing.T) {
	capV3 := string([]byte{0, 0, 0, 3, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	reg := newRegistry(t)
	ref := reg.push(t, "test/priv:v1", image(t, "amd64", v1.Config{}, layer(t,
		ent{Name: "bin/", Type: tar.TypeDir, Mode: 0o777},
		ent{Name: "bin/rootshell", Body: "#!/bin/sh", Mode: 0o4755},
		ent{Name: "bin/capped", Body: "x", Mode: 0o755, Xattrs: map[string]string{"security.capability": capV3}},
		ent{Name: "dev/sda", Type: tar.TypeBlock, Major: 8, Minor: 0, Mode: 0o666},
	)))
	home := t.TempDir()
	s := openStore(t, home)
	var during []string
	testHookBeforeFinish = func() {
		// What exists on the host while the layers are applied.
		for _, root := range []string{home, "/dev/shm"} {
			filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				fi, err := d.Info()
				if err != nil {
					return nil
				}
				m := fi.Mode()
				if m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeDevice|fs.ModeCharDevice) != 0 {
					t.Errorf("%s is %v on the host", p, m)
				}
				if strings.Contains(p, ".tmp-") {
					during = append(during, p)
					if d.IsDir() && m.Perm() != 0o700 || !d.IsDir() && m.Perm() != 0o600 {
						t.Errorf("%s is %v: the build area must be private", p, m)
					}
					if b, _ := unix.Lgetxattr(p, "security.capability", make([]byte, 64)); b > 0 {
						t.Errorf("%s carries a file capability on the host", p)
					}
				}
				return nil
			})
		}
	}
	t.Cleanup(func() { testHookBeforeFinish = nil })
	img := get(t, s, ref, Options{})
	if len(during) != 2 { // the entry's temporary directory and its rootfs.ext4
		t.Errorf("during the build the host held %v", during)
	}
	for p, want := range map[string]string{"/bin/rootshell": "Mode:  04755", "/dev/sda": "Type: block special", "/bin": "Mode:  0777"} {
		if out, _ := debugfs(t, img.Disk, "stat "+p); !strings.Contains(out, want) {
			t.Errorf("%s in the image: want %q in\n%s", p, want, out)
		}
	}
	if out, _ := debugfs(t, img.Disk, "ea_list /bin/capped"); !strings.Contains(out, "security.capability (24)") {
		t.Errorf("capability in the image: %q", out)
	}
	if fi, err := os.Stat(img.Disk); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("cached image: %v %v", fi.Mode(), err)
	}
}
