package imagefs

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestWhiteoutsAndOpaqueDirs(t *testing.T) {
	reg := newRegistry(t)
	l1 := layer(t,
		dir("etc/"), file("etc/a", "A"), file("etc/b", "B"),
		dir("opq/"), file("opq/x", "X"), dir("opq/sub/"), file("opq/sub/y", "Y"),
		dir("keep/"), file("keep/k", "K"), file("gone-dir/inner", "I"),
	)
	l2 := layer(t,
		file("etc/.wh.a", ""),
		file("opq/new", "NEW"), // before the marker: must survive it
		file("opq/.wh..wh..opq", ""),
		dir("opq/sub/"), file("opq/sub/z", "Z"), // re-created dir of this layer keeps its new content only
		file(".wh.gone-dir", ""),
		file("keep/.wh.never-existed", ""),
	)
	l3 := layer(t, file("etc/a", "A again"))
	ref := reg.push(t, "test/wh:v1", image(t, "amd64", v1.Config{}, l1, l2))
	ref3 := reg.push(t, "test/wh:v2", image(t, "amd64", v1.Config{}, l1, l2, l3))
	s := openStore(t, t.TempDir())
	img := get(t, s, ref, Options{})
	d := img.Disk
	for p, want := range map[string]string{"/etc/b": "B", "/opq/new": "NEW", "/opq/sub/z": "Z", "/keep/k": "K"} {
		if got := catExt4(t, d, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"/etc/a", "/etc/.wh.a", "/opq/x", "/opq/sub/y", "/opq/.wh..wh..opq", "/gone-dir", "/keep/.wh.never-existed"} {
		if existsExt4(t, d, p) {
			t.Errorf("%s exists, should be whited out", p)
		}
	}
	img3 := get(t, s, ref3, Options{})
	if got := catExt4(t, img3.Disk, "/etc/a"); got != "A again" {
		t.Errorf("re-added /etc/a = %q", got)
	}
}

// TestModesOwnersLinks: what the image asks for is what the ext4 image
// holds, whoever runs the pull (nothing depends on the host's privileges).
func TestModesOwnersLinks(t *testing.T) {
	reg := newRegistry(t)
	l := layer(t,
		ent{Name: "bin/", Type: tar.TypeDir, Mode: 0o755},
		ent{Name: "bin/su", Body: "#!su", Mode: 0o4755, UID: 1234, GID: 2345},
		ent{Name: "bin/sg", Body: "sg", Mode: 0o2711, UID: 0, GID: 42},
		hardlink("bin/su-link", "bin/su"),
		ent{Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
		ent{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		ent{Name: "etc/shadow", Body: "secret", Mode: 0o000},
		ent{Name: "home/u/", Type: tar.TypeDir, Mode: 0o500, UID: 100000, GID: 100000},
		ent{Name: "home/u/file", Body: "f", Mode: 0o400, UID: 100000, GID: 100000},
		ent{Name: "lnk", Type: tar.TypeSymlink, Link: "/bin/su", UID: 77, GID: 88},
		ent{Name: "dev/null", Type: tar.TypeChar, Major: 1, Minor: 3, Mode: 0o666},
		ent{Name: "dev/sda", Type: tar.TypeBlock, Major: 8, Minor: 0, Mode: 0o660, GID: 6},
		ent{Name: "run/fifo", Type: tar.TypeFifo, Mode: 0o600},
		ent{Name: "cap", Body: "c", Mode: 0o755, Xattrs: map[string]string{"user.smol": "hello"}},
	)
	ref := reg.push(t, "test/modes:v1", image(t, "amd64", v1.Config{}, l))
	s := openStore(t, t.TempDir())
	d := get(t, s, ref, Options{}).Disk
	check := func(p, typ string, mode uint64, uid, gid int) ext4Stat {
		t.Helper()
		st := statExt4(t, d, p)
		if st.typ != typ || st.mode != mode || st.uid != uid || st.gid != gid {
			t.Errorf("%s: got %s %04o %d:%d, want %s %04o %d:%d", p, st.typ, st.mode, st.uid, st.gid, typ, mode, uid, gid)
		}
		return st
	}
	su := check("/bin/su", "regular", 0o4755, 1234, 2345)
	check("/bin/sg", "regular", 0o2711, 0, 42)
	link := check("/bin/su-link", "regular", 0o4755, 1234, 2345)
	if su.inode != link.inode || su.links != 2 {
		t.Errorf("hardlink: inodes %d/%d links %d", su.inode, link.inode, su.links)
	}
	check("/tmp", "directory", 0o1777, 0, 0)
	check("/etc/shadow", "regular", 0, 0, 0)
	check("/home/u", "directory", 0o500, 100000, 100000)
	check("/home/u/file", "regular", 0o400, 100000, 100000)
	if got := catExt4(t, d, "/etc/shadow"); got != "secret" {
		t.Errorf("shadow = %q", got)
	}
	ls := check("/lnk", "symlink", 0o777, 77, 88)
	if ls.fastLinkDst != "/bin/su" {
		t.Errorf("symlink target %q", ls.fastLinkDst)
	}
	check("/dev/null", "character", 0o666, 0, 0)
	check("/dev/sda", "block", 0o660, 0, 6)
	check("/run/fifo", "FIFO", 0o600, 0, 0)
	check("/", "directory", 0o755, 0, 0)
	out, _ := debugfs(t, d, "stat /dev/null")
	if !strings.Contains(out, "Device major/minor number: 01:03") {
		t.Errorf("/dev/null device numbers: %s", out)
	}
	out, _ = debugfs(t, d, "ea_get /cap user.smol")
	if !strings.Contains(out, "hello") {
		t.Errorf("xattr user.smol: %q", out)
	}
}

func TestMultiArchIndex(t *testing.T) {
	reg := newRegistry(t)
	amd := image(t, "amd64", v1.Config{}, layer(t, file("arch", "amd64")))
	arm := image(t, "arm64", v1.Config{}, layer(t, file("arch", "arm64")))
	armv7 := image(t, "arm", v1.Config{}, layer(t, file("arch", "armv7")))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	ref := reg.pushIndex(t, "test/multi:v1", idx)
	s := openStore(t, t.TempDir())
	img := get(t, s, ref, Options{})
	if got := catExt4(t, img.Disk, "/arch"); got != "amd64" {
		t.Errorf("picked %q, want amd64", got)
	}
	amdDigest, _ := amd.Digest()
	if img.Digest != amdDigest.String() {
		t.Errorf("digest %s, want the amd64 manifest %s", img.Digest, amdDigest)
	}
	img = get(t, s, ref, Options{Platform: "linux/arm64"})
	if got := catExt4(t, img.Disk, "/arch"); got != "arm64" {
		t.Errorf("picked %q, want arm64", got)
	}

	noAmd := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: armv7, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}}},
	)
	ref2 := reg.pushIndex(t, "test/noamd:v1", noAmd)
	_, err := s.Get(context.Background(), ref2, Options{})
	if err == nil || !strings.Contains(err.Error(), "no linux/amd64 image") || !strings.Contains(err.Error(), "linux/arm64, linux/arm/v7") {
		t.Errorf("want a clear platform error, got %v", err)
	}
}

func TestConfigRoundTrip(t *testing.T) {
	reg := newRegistry(t)
	c := v1.Config{Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"}, Env: []string{"PATH=/bin", "A=b c"},
		WorkingDir: "/work", User: "1000:1000"}
	ref := reg.push(t, "test/cfg:v1", image(t, "amd64", c, layer(t, file("x", "x"))))
	home := t.TempDir()
	img := get(t, openStore(t, home), ref, Options{})
	img2 := get(t, openStore(t, home), ref, Options{Pull: PullNever})
	for _, im := range []*Image{img, img2} {
		got := im.Config
		if strings.Join(got.Entrypoint, "|") != "/bin/sh|-c" || strings.Join(got.Cmd, "|") != "echo hi" ||
			strings.Join(got.Env, "|") != "PATH=/bin|A=b c" || got.WorkingDir != "/work" || got.User != "1000:1000" {
			t.Errorf("config %+v", got)
		}
		if im.Ref != ref || !filepath.IsAbs(im.Disk) || im.Size <= 0 || im.Created.IsZero() || !strings.HasPrefix(im.Digest, "sha256:") {
			t.Errorf("image %+v", im)
		}
	}
}

func TestCachedGetMakesNoRequests(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "test/cache:v1", image(t, "amd64", v1.Config{}, layer(t, file("a", "a")), layer(t, file("b", "b"))))
	home := t.TempDir()
	s := openStore(t, home)
	first := get(t, s, ref, Options{})
	if s.Downloads() != 2 {
		t.Errorf("first pull downloaded %d layers, want 2", s.Downloads())
	}
	reg.requests.Store(0)
	s2 := openStore(t, home)
	again := get(t, s2, ref, Options{})
	if n := reg.requests.Load(); n != 0 || s2.Downloads() != 0 {
		t.Errorf("cached Get made %d requests, %d downloads", n, s2.Downloads())
	}
	if again.Disk != first.Disk || again.Digest != first.Digest {
		t.Errorf("cached Get returned %+v, want %+v", again, first)
	}
	// Pull (and PullAlways) revalidate the manifest but reuse the entry.
	img, err := s2.Pull(context.Background(), ref, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if reg.requests.Load() == 0 || s2.Downloads() != 0 || img.Digest != first.Digest {
		t.Errorf("Pull: %d requests, %d downloads", reg.requests.Load(), s2.Downloads())
	}
	// A new tag: PullAlways picks up the new digest.
	reg.push(t, "test/cache:v1", image(t, "amd64", v1.Config{}, layer(t, file("c", "c"))))
	img, err = s2.Get(context.Background(), ref, Options{Pull: PullAlways})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest == first.Digest || s2.Downloads() != 1 {
		t.Errorf("PullAlways after retag: digest %s downloads %d", img.Digest, s2.Downloads())
	}
}

func TestPullNeverNotCached(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "test/never:v1", image(t, "amd64", v1.Config{}, layer(t, file("a", "a"))))
	s := openStore(t, t.TempDir())
	reg.requests.Store(0)
	_, err := s.Get(context.Background(), ref, Options{Pull: PullNever})
	if !errors.Is(err, ErrNotCached) || !strings.Contains(err.Error(), ref) {
		t.Errorf("got %v, want ErrNotCached naming the ref", err)
	}
	if reg.requests.Load() != 0 {
		t.Errorf("PullNever made %d requests", reg.requests.Load())
	}
}

func assertCacheEmpty(t *testing.T, s *Store) {
	t.Helper()
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("cache lists %v", list)
	}
	filepath.WalkDir(s.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != s.root && d.IsDir() && d.Name() != "sha256" && d.Name() != "tmp" {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

func TestCorruptOrTruncatedLayer(t *testing.T) {
	for _, how := range []string{"flip", "truncate", "cut"} {
		t.Run(how, func(t *testing.T) {
			reg := newRegistry(t)
			big := strings.Repeat("smol image data ", 1<<14)
			l := layer(t, file("a", "a"), file("big", big))
			ref := reg.push(t, "test/bad:v1", image(t, "amd64", v1.Config{}, layer(t, file("ok", "ok")), l))
			dg, _ := l.Digest()
			reg.mu.Lock()
			reg.mangle[dg.String()] = how
			reg.mu.Unlock()
			s := openStore(t, t.TempDir())
			_, err := s.Get(context.Background(), ref, Options{})
			if err == nil {
				t.Fatal("Get of a corrupt layer succeeded")
			}
			t.Logf("error: %v", err)
			assertCacheEmpty(t, s)
		})
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := newRegistry(t)
	s := openStore(t, t.TempDir())
	_, err := s.Get(context.Background(), reg.host+"/no/such:image", Options{})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing image: %v", err)
	}
	_, err = s.Get(context.Background(), "127.0.0.1:1/x/y:z", Options{})
	if err == nil || !strings.Contains(err.Error(), "registry 127.0.0.1:1 unreachable") {
		t.Errorf("unreachable: %v", err)
	}
	if _, err := s.Get(context.Background(), "UPPER/case", Options{}); err == nil {
		t.Error("invalid ref accepted")
	}
	if _, err := ParsePullPolicy("sometimes"); err == nil {
		t.Error("bad pull policy accepted")
	}
	if _, err := s.Get(context.Background(), "x", Options{Platform: "amd64"}); err == nil {
		t.Error("bad platform accepted")
	}
}

func TestEscapesStayInside(t *testing.T) {
	sentinel := t.TempDir()
	secret := filepath.Join(sentinel, "secret")
	if err := os.WriteFile(secret, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("../", 30)
	reg := newRegistry(t)
	ref := reg.push(t, "test/evil:v1", image(t, "amd64", v1.Config{}, layer(t,
		file("../escape1", "1"),
		file("/abs", "2"),
		file(up+sentinel[1:]+"/dotdot", "3"),
		symlink("abslink", sentinel),
		file("abslink/through-abs", "4"),
		symlink("rellink", up+sentinel[1:]),
		file("rellink/through-rel", "5"),
		symlink("root", "/"),
		file("root/etc/via-root", "6"),
		symlink("loop", "loop"),
		symlink("secretlink", secret),
		file("secretlink", "replaced, not followed"),
	)))
	s := openStore(t, t.TempDir())
	img := get(t, s, ref, Options{})
	for p, want := range map[string]string{
		"/escape1": "1", "/abs": "2", sentinel + "/dotdot": "3", sentinel + "/through-abs": "4",
		sentinel + "/through-rel": "5", "/etc/via-root": "6", "/secretlink": "replaced, not followed",
	} {
		if got := catExt4(t, img.Disk, p); got != want {
			t.Errorf("%s = %q, want %q (inside the image)", p, got, want)
		}
	}
	if st := statExt4(t, img.Disk, "/abslink"); st.typ != "symlink" {
		t.Errorf("abslink is %s", st.typ)
	}

	// Hardlinks to outside: the target is looked up inside the root, where it
	// does not exist, so the pull fails and nothing is linked.
	for i, target := range []string{secret, up + secret[1:], "abslink/secret"} {
		ref := reg.push(t, "test/evil-link:v"+string(rune('0'+i)), image(t, "amd64", v1.Config{}, layer(t,
			symlink("abslink", sentinel),
			hardlink("hl", target),
		)))
		if _, err := s.Get(context.Background(), ref, Options{}); err == nil {
			t.Errorf("hardlink to %s succeeded", target)
		}
	}
	// Nothing was written outside.
	des, _ := os.ReadDir(sentinel)
	if len(des) != 1 {
		t.Errorf("sentinel dir holds %v", des)
	}
	if b, _ := os.ReadFile(secret); string(b) != "keep" {
		t.Errorf("secret changed: %q", b)
	}
	if n := nlink(t, secret); n != 1 {
		t.Errorf("secret has %d links", n)
	}
}

func TestDockerSaveAndLayoutSources(t *testing.T) {
	c := v1.Config{Cmd: []string{"/hello"}}
	img := image(t, "amd64", c, layer(t, file("hello", "from a tarball")), layer(t, file("second", "2")))
	dir := t.TempDir()

	// docker save format
	saved := filepath.Join(dir, "saved.tar")
	tag, _ := name.NewTag("example.com/hello:1")
	if err := tarball.WriteToFile(saved, tag, img); err != nil {
		t.Fatal(err)
	}
	// OCI layout directory, and the same as a tarball
	lay := filepath.Join(dir, "layout")
	p, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	layTar := filepath.Join(dir, "layout.tar")
	tarDir(t, lay, layTar)

	s := openStore(t, t.TempDir())
	for _, src := range []string{saved, lay, layTar} {
		got := get(t, s, src, Options{Pull: PullNever})
		if c := catExt4(t, got.Disk, "/hello"); c != "from a tarball" {
			t.Errorf("%s: /hello = %q", src, c)
		}
		if got.Ref != src || strings.Join(got.Config.Cmd, " ") != "/hello" {
			t.Errorf("%s: %+v", src, got)
		}
	}
	if s.Downloads() != 0 {
		t.Errorf("local sources counted %d downloads", s.Downloads())
	}
	list, _ := s.List()
	if len(list) != 3 {
		t.Errorf("List = %v", list)
	}
	// The layout dir and layout tar share a manifest digest, hence an entry.
	entries, _ := s.entries()
	if len(entries) != 2 {
		t.Errorf("%d entries, want 2 (docker-save keys by config digest)", len(entries))
	}
	// An unchanged tarball is not read again: same size and mtime, new
	// bytes, still served from the cache; a touched one is re-read.
	fi, _ := os.Stat(saved)
	junk := make([]byte, fi.Size())
	if err := os.WriteFile(saved, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(saved, fi.ModTime(), fi.ModTime())
	get(t, s, saved, Options{})
	os.Chtimes(saved, fi.ModTime().Add(time.Second), fi.ModTime().Add(time.Second))
	if _, err := s.Get(context.Background(), saved, Options{}); err == nil {
		t.Error("changed tarball not re-read")
	}
	bad := filepath.Join(dir, "bad.tar")
	os.WriteFile(bad, tarBytes(t, file("hello", "x")), 0o644)
	if _, err := s.Get(context.Background(), bad, Options{}); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("bad tarball: %v", err)
	}
	if _, err := s.Get(context.Background(), dir, Options{}); err == nil || !strings.Contains(err.Error(), "index.json") {
		t.Errorf("non-layout dir: %v", err)
	}
}

func TestListAndRemove(t *testing.T) {
	reg := newRegistry(t)
	refA := reg.push(t, "test/a:v1", image(t, "amd64", v1.Config{}, layer(t, file("a", "a"))))
	refB := reg.push(t, "test/b:v1", image(t, "amd64", v1.Config{}, layer(t, file("b", "b"))))
	refB2 := reg.host + "/test/b2:v1"
	reg.push(t, "test/b2:v1", image(t, "amd64", v1.Config{}, layer(t, file("b", "b"))))
	s := openStore(t, t.TempDir())
	a := get(t, s, refA, Options{})
	b := get(t, s, refB, Options{})
	b2 := get(t, s, refB2, Options{})
	if b.Digest != b2.Digest {
		t.Fatalf("same image, different digests")
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, im := range list {
		refs = append(refs, im.Ref)
	}
	want := []string{refA, refB, refB2}
	sort.Strings(want)
	if strings.Join(refs, " ") != strings.Join(want, " ") {
		t.Errorf("List refs = %v", refs)
	}
	// Removing one of two refs keeps the entry.
	if err := s.Remove(refB); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Disk); err != nil {
		t.Errorf("entry removed while %s still points to it", refB2)
	}
	if err := s.Remove(refB2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Disk); !os.IsNotExist(err) {
		t.Errorf("entry kept after its last ref was removed")
	}
	// By digest prefix.
	if err := s.Remove(strings.TrimPrefix(a.Digest, "sha256:")[:12]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Disk); !os.IsNotExist(err) {
		t.Errorf("entry kept after removal by digest")
	}
	for _, bad := range []string{refA, "sha256:0123", "0123456789ab", "nope"} {
		if err := s.Remove(bad); err == nil {
			t.Errorf("Remove(%q) of unknown succeeded", bad)
		}
	}
	assertCacheEmpty(t, s)
}

func TestConcurrentGet(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "test/conc:v1", image(t, "amd64", v1.Config{},
		layer(t, file("a", strings.Repeat("a", 1<<20))), layer(t, file("b", "b"))))
	home := t.TempDir()
	stores := []*Store{openStore(t, home), openStore(t, home), openStore(t, home)}
	var wg sync.WaitGroup
	imgs := make([]*Image, 4)
	errs := make([]error, 4)
	for i := range imgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			imgs[i], errs[i] = stores[i%len(stores)].Get(context.Background(), ref, Options{})
		}()
	}
	wg.Wait()
	total := 0
	for i := range imgs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if imgs[i].Disk != imgs[0].Disk {
			t.Errorf("different disks %s %s", imgs[i].Disk, imgs[0].Disk)
		}
	}
	for _, s := range stores {
		total += s.Downloads()
	}
	if total != 2 {
		t.Errorf("%d layer downloads in all, want 2 (one build)", total)
	}
	entries, _ := os.ReadDir(filepath.Join(home, "images", "sha256"))
	dirs := 0
	for _, e := range entries {
		if e.IsDir() {
			dirs++
		}
	}
	if dirs != 1 {
		t.Errorf("%d entry dirs: %v", dirs, entries)
	}
}

func TestInterruptedBuildIsCleaned(t *testing.T) {
	home := t.TempDir()
	s := openStore(t, home)
	// A leftover of a killed pull: looks like an entry but is a tmp dir.
	junk := filepath.Join(s.root, "sha256", strings.Repeat("ab", 32)+".tmp-dead")
	os.MkdirAll(filepath.Join(junk, "rootfs"), 0o755)
	os.WriteFile(filepath.Join(junk, markerFile), nil, 0o644)
	if list, _ := s.List(); len(list) != 0 {
		t.Errorf("tmp dir listed: %v", list)
	}
	openStore(t, home)
	if _, err := os.Stat(junk); !os.IsNotExist(err) {
		t.Errorf("stale tmp dir not removed by Open")
	}
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"a/b": "a/b", "./a/b/": "a/b", "/abs": "abs", "../x": "x", "a/../../b": "b", ".": "", "/": "", "a//b/./c": "a/b/c",
	} {
		if got := cleanName(in); got != want {
			t.Errorf("cleanName(%q) = %q, want %q", in, got, want)
		}
	}
}

// Local layouts are not verified by go-containerregistry: our own hashing
// must catch a damaged blob.
func TestCorruptLayoutBlob(t *testing.T) {
	for _, how := range []string{"flip", "truncate"} {
		t.Run(how, func(t *testing.T) {
			l := layer(t, file("a", strings.Repeat("layout data ", 4096)))
			img := image(t, "amd64", v1.Config{}, l)
			dir := filepath.Join(t.TempDir(), "layout")
			p, err := layout.Write(dir, empty.Index)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.AppendImage(img); err != nil {
				t.Fatal(err)
			}
			dg, _ := l.Digest()
			blob := filepath.Join(dir, "blobs", "sha256", dg.Hex)
			b, err := os.ReadFile(blob)
			if err != nil {
				t.Fatal(err)
			}
			if how == "flip" {
				b[len(b)-12] ^= 0x55 // in the gzip trailer: tar and gzip may not notice
			} else {
				b = b[:len(b)-8]
			}
			if err := os.WriteFile(blob, b, 0o644); err != nil {
				t.Fatal(err)
			}
			s := openStore(t, t.TempDir())
			_, err = s.Get(context.Background(), dir, Options{})
			if err == nil {
				t.Fatal("corrupt layout blob accepted")
			}
			t.Logf("error: %v", err)
			assertCacheEmpty(t, s)
		})
	}
}
