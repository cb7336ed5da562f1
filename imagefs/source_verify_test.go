package imagefs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// These tests pin what a local source (an OCI layout or a docker-save
// archive, written by anyone) can and cannot do to the cache: every digest
// it names is checked against the bytes, its metadata is read capped, its
// entries never answer for a registry reference, and the cache is private.

// writeLayout writes img as the one image of a new OCI layout in dir.
func writeLayout(t testing.TB, dir string, img v1.Image) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
}

// editIndex decodes dir's index.json, lets edit change it and writes it back.
func editIndex(t testing.TB, dir string, edit func(*v1.IndexManifest)) {
	t.Helper()
	p := filepath.Join(dir, "index.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var im v1.IndexManifest
	if err := json.Unmarshal(b, &im); err != nil {
		t.Fatal(err)
	}
	edit(&im)
	if b, err = json.Marshal(&im); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// putBlob stores b in the layout under the given digest (its own if zero)
// and returns that digest.
func putBlob(t testing.TB, dir string, b []byte, as v1.Hash) v1.Hash {
	t.Helper()
	if as == (v1.Hash{}) {
		sum := sha256.Sum256(b)
		as = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	}
	p := filepath.Join(dir, "blobs", as.Algorithm, as.Hex)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return as
}

// forgeLayout writes a layout holding content whose index.json names its
// manifest by claim: the attack of a layout posing as a registry image.
func forgeLayout(t testing.TB, dir string, content v1.Image, claim v1.Hash) {
	t.Helper()
	writeLayout(t, dir, content)
	raw, err := content.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	putBlob(t, dir, raw, claim)
	editIndex(t, dir, func(im *v1.IndexManifest) { im.Manifests[0].Digest = claim })
}

func digestOf(t testing.TB, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// oneLineError fails unless err is a one-line error containing want.
func oneLineError(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want an error containing %q", want)
	}
	if msg := err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
		t.Fatalf("error %q: want one line containing %q", msg, want)
	}
}

// trustedRegistryImage pushes an image whose /who says "registry".
func trustedRegistryImage(t testing.TB) (*testRegistry, string, v1.Image) {
	reg := newRegistry(t)
	img := image(t, "amd64", v1.Config{Cmd: []string{"/trusted"}}, layer(t, file("who", "registry")))
	return reg, reg.push(t, "library/python:3.12", img), img
}

// assertRegistryContent checks that ref yields the registry's own image
// under both pull policies that may answer from the cache.
func assertRegistryContent(t *testing.T, s *Store, ref string, want v1.Hash) {
	t.Helper()
	for _, pull := range []PullPolicy{PullMissing, PullAlways} {
		img := get(t, s, ref, Options{Pull: pull})
		if got := catExt4(t, img.Disk, "/who"); got != "registry" {
			t.Errorf("--pull %s: %s runs /who = %q, want the registry's content", pull, ref, got)
		}
		if img.Digest != want.String() {
			t.Errorf("--pull %s: digest %s, want %s", pull, img.Digest, want)
		}
	}
}

func TestLayoutClaimingRegistryDigest(t *testing.T) {
	for _, order := range []string{"registry first", "layout first"} {
		t.Run(order, func(t *testing.T) {
			reg, ref, trusted := trustedRegistryImage(t)
			want := digestOf(t, trusted)
			evil := image(t, "amd64", v1.Config{Cmd: []string{"/evil"}}, layer(t, file("who", "layout")))
			lay := filepath.Join(t.TempDir(), "layout")
			forgeLayout(t, lay, evil, want)
			layTar := lay + ".tar"
			tarDir(t, lay, layTar)

			s := openStore(t, t.TempDir())
			if order == "registry first" {
				assertRegistryContent(t, s, ref, want)
			}
			for _, src := range []string{lay, layTar} {
				for _, pull := range []PullPolicy{PullMissing, PullAlways} {
					_, err := s.Get(context.Background(), src, Options{Pull: pull})
					oneLineError(t, err, "does not match its digest")
					t.Logf("%s: %v", filepath.Base(src), err)
				}
			}
			assertRegistryContent(t, s, ref, want)
			// Nothing of the layout was cached, nor refs to it.
			list, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].Ref != ref {
				t.Errorf("List = %+v, want only %s", list, ref)
			}
			_ = reg
		})
	}
}

// A layout may hold the very image a registry serves; it is then cached
// apart from the registry's entry, so neither ever stands in for the other.
func TestLayoutOfRegistryImageIsCachedSeparately(t *testing.T) {
	_, ref, trusted := trustedRegistryImage(t)
	want := digestOf(t, trusted)
	lay := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, lay, trusted)

	s := openStore(t, t.TempDir())
	local := get(t, s, lay, Options{})
	remote := get(t, s, ref, Options{})
	if local.Digest != want.String() || remote.Digest != want.String() {
		t.Errorf("digests %s and %s, want both %s", local.Digest, remote.Digest, want)
	}
	if local.Disk == remote.Disk {
		t.Fatalf("the layout and the registry image share the entry %s", local.Disk)
	}
	if got := catExt4(t, local.Disk, "/who"); got != "registry" {
		t.Errorf("layout's /who = %q", got)
	}
	entries, _ := s.entries()
	if len(entries) != 2 {
		t.Errorf("%d entries, want 2", len(entries))
	}
	list, _ := s.List()
	if len(list) != 2 {
		t.Errorf("List = %+v", list)
	}

	// The bare digest now names two entries; the local key space's prefix
	// names one.
	err := s.Remove(want.String())
	oneLineError(t, err, "ambiguous")
	if !strings.Contains(err.Error(), layoutSpace+":"+want.Hex) {
		t.Errorf("ambiguity error %q does not say how to name the layout's entry", err)
	}
	if err := s.Remove(layoutSpace + ":" + want.Hex[:12]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(local.Disk); !os.IsNotExist(err) {
		t.Errorf("layout entry kept")
	}
	if img := get(t, s, ref, Options{Pull: PullNever}); img.Disk != remote.Disk {
		t.Errorf("registry entry moved: %s", img.Disk)
	}
	if err := s.Remove(want.Hex[:12]); err != nil {
		t.Fatal(err)
	}
	assertCacheEmpty(t, s)
}

// tarFiles writes an uncompressed tar of the given members in order; a
// member whose name ends in "@" followed by a target is a symlink.
func tarFiles(t testing.TB, members ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		h := &tar.Header{Name: m[0], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(m[1])), ModTime: time.Unix(1e9, 0)}
		if name, target, ok := strings.Cut(m[0], "@"); ok {
			h = &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777, ModTime: time.Unix(1e9, 0)}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, m[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A docker-save entry is keyed by the digest of its config file. A config
// whose bytes are a registry manifest has that manifest's digest: it must
// get an entry of its own, not the registry image's.
func TestDockerSaveConfigEqualToRegistryManifest(t *testing.T) {
	for _, order := range []string{"registry first", "docker-save first"} {
		t.Run(order, func(t *testing.T) {
			_, ref, trusted := trustedRegistryImage(t)
			want := digestOf(t, trusted)
			raw, err := trusted.RawManifest()
			if err != nil {
				t.Fatal(err)
			}
			saved := filepath.Join(t.TempDir(), "saved.tar")
			b := tarFiles(t,
				[2]string{"config.json", string(raw)},
				[2]string{"manifest.json", `[{"Config":"config.json","RepoTags":["evil:1"],"Layers":[]}]`})
			if err := os.WriteFile(saved, b, 0o644); err != nil {
				t.Fatal(err)
			}

			s := openStore(t, t.TempDir())
			if order == "registry first" {
				assertRegistryContent(t, s, ref, want)
			}
			img := get(t, s, saved, Options{})
			if img.Digest != want.String() {
				t.Fatalf("docker-save digest %s, want the config's %s", img.Digest, want)
			}
			if existsExt4(t, img.Disk, "/who") {
				t.Errorf("the docker-save ran the registry image's root filesystem")
			}
			assertRegistryContent(t, s, ref, want)
			if again := get(t, s, saved, Options{Pull: PullAlways}); again.Disk != img.Disk {
				t.Errorf("docker-save entry moved from %s to %s", img.Disk, again.Disk)
			}
		})
	}
}

// docker-save names its config after the config's digest; a name that
// claims another digest than the content has is refused.
func TestDockerSaveConfigNameMustMatch(t *testing.T) {
	img := image(t, "amd64", v1.Config{}) // no layers: the archive needs none
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	lie := strings.Repeat("ab", 32)
	saved := filepath.Join(t.TempDir(), "saved.tar")
	os.WriteFile(saved, tarFiles(t,
		[2]string{lie + ".json", string(cfg)},
		[2]string{"manifest.json", `[{"Config":"` + lie + `.json","Layers":[]}]`}), 0o644)
	_, err = openStore(t, t.TempDir()).Get(context.Background(), saved, Options{})
	oneLineError(t, err, "does not match the digest in its name")
}

// The other digests a layout names are checked too: the manifest's config
// and nested indexes.
func TestLayoutConfigAndNestedIndexVerified(t *testing.T) {
	img := image(t, "amd64", v1.Config{Cmd: []string{"/real"}}, layer(t, file("a", "a")))
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("config", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		putBlob(t, lay, []byte(`{"architecture":"amd64","os":"linux","config":{"Cmd":["/planted"]},"rootfs":{"type":"layers","diff_ids":[]}}`), cfgName)
		_, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{})
		oneLineError(t, err, "config "+cfgName.String()+": content does not match its digest")
	})

	t.Run("nested index", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		var top v1.IndexManifest
		b, _ := os.ReadFile(filepath.Join(lay, "index.json"))
		json.Unmarshal(b, &top)
		child, _ := json.Marshal(&top)
		honest := putBlob(t, lay, child, v1.Hash{})
		nest := func(d v1.Hash) {
			editIndex(t, lay, func(im *v1.IndexManifest) {
				im.Manifests = []v1.Descriptor{{MediaType: types.OCIImageIndex, Digest: d, Size: int64(len(child))}}
			})
		}
		nest(honest)
		s := openStore(t, t.TempDir())
		if got := get(t, s, lay, Options{}); strings.Join(got.Config.Cmd, " ") != "/real" {
			t.Errorf("nested layout: %+v", got.Config)
		}
		claim := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}
		putBlob(t, lay, child, claim)
		nest(claim)
		_, err := s.Get(context.Background(), lay, Options{})
		oneLineError(t, err, "image index "+claim.String()+": content does not match its digest")
	})
}

// Metadata is capped before it is decoded; whitespace keeps the oversized
// documents valid JSON (and their digests honest), so only the cap stops
// them.
func TestLocalMetadataIsCapped(t *testing.T) {
	pad := strings.Repeat(" ", maxMetaBytes)
	img := image(t, "amd64", v1.Config{}, layer(t, file("a", "a")))
	const tooBig = "larger than 4 MiB"

	t.Run("index.json", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		p := filepath.Join(lay, "index.json")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, append(b, pad...), 0o644)
		_, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{})
		oneLineError(t, err, "index.json is "+tooBig)
	})

	t.Run("manifest", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		raw, _ := img.RawManifest()
		big := append(append([]byte(nil), raw...), pad...)
		d := putBlob(t, lay, big, v1.Hash{})
		editIndex(t, lay, func(im *v1.IndexManifest) { im.Manifests[0].Digest, im.Manifests[0].Size = d, int64(len(big)) })
		_, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{})
		oneLineError(t, err, "manifest "+d.String()+": blob is "+tooBig)
	})

	t.Run("config", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		cfg, _ := img.RawConfigFile()
		big := append(append([]byte(nil), cfg...), pad...)
		cd := putBlob(t, lay, big, v1.Hash{})
		m, _ := img.Manifest()
		m.Config.Digest, m.Config.Size = cd, int64(len(big))
		mb, _ := json.Marshal(m)
		md := putBlob(t, lay, mb, v1.Hash{})
		editIndex(t, lay, func(im *v1.IndexManifest) { im.Manifests[0].Digest, im.Manifests[0].Size = md, int64(len(mb)) })
		_, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{})
		oneLineError(t, err, "config "+cd.String()+": blob is "+tooBig)
	})

	t.Run("docker-save manifest.json", func(t *testing.T) {
		saved := filepath.Join(t.TempDir(), "saved.tar")
		os.WriteFile(saved, tarFiles(t,
			[2]string{"c.json", `{}`},
			[2]string{"manifest.json", `[{"Config":"c.json","Layers":[]}]` + pad}), 0o644)
		_, err := openStore(t, t.TempDir()).Get(context.Background(), saved, Options{})
		oneLineError(t, err, "manifest.json: it is "+tooBig)
	})

	t.Run("docker-save config", func(t *testing.T) {
		saved := filepath.Join(t.TempDir(), "saved.tar")
		os.WriteFile(saved, tarFiles(t,
			[2]string{"c.json", `{}` + pad},
			[2]string{"manifest.json", `[{"Config":"c.json","Layers":[]}]`}), 0o644)
		_, err := openStore(t, t.TempDir()).Get(context.Background(), saved, Options{})
		oneLineError(t, err, `config "c.json": it is `+tooBig)
	})

	// A FIFO in place of index.json must not hang the open.
	t.Run("fifo", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		p := filepath.Join(lay, "index.json")
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skip(err)
		}
		done := make(chan error, 1)
		go func() { _, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{}); done <- err }()
		select {
		case err := <-done:
			oneLineError(t, err, "not a regular file")
		case <-time.After(10 * time.Second):
			t.Fatal("a FIFO as index.json hangs the pull")
		}
	})

	// A docker-save link chain longer than maxLinkHops is refused.
	t.Run("docker-save links", func(t *testing.T) {
		var members [][2]string
		for i := range maxLinkHops + 2 {
			members = append(members, [2]string{fmt.Sprintf("c%d.json@c%d.json", i, i+1)})
		}
		members = append(members, [2]string{fmt.Sprintf("c%d.json", maxLinkHops+2), `{}`},
			[2]string{"manifest.json", `[{"Config":"c0.json","Layers":[]}]`})
		saved := filepath.Join(t.TempDir(), "saved.tar")
		os.WriteFile(saved, tarFiles(t, members...), 0o644)
		_, err := openStore(t, t.TempDir()).Get(context.Background(), saved, Options{})
		oneLineError(t, err, "links to follow")
	})
}

// Text an image chose reaches error messages quoted, never as raw bytes a
// terminal would interpret.
func TestImageTextIsQuotedInErrors(t *testing.T) {
	img := image(t, "amd64", v1.Config{}, layer(t, file("a", "a")))
	d := digestOf(t, img)
	raw, _ := img.RawManifest()
	// Control characters as JSON escapes: decoded, they are an OSC title
	// change and a screen clear.
	const esc = `\u001b]0;pwned\u0007\u001b[2J`
	for name, index := range map[string]string{
		"platforms": `{"schemaVersion":2,"manifests":[` +
			`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d.String() + `","size":1,"platform":{"os":"linux","architecture":"arm64` + esc + `"}},` +
			`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d.String() + `","size":1,"platform":{"os":"linux, linux/amd64","architecture":"x"}}]}`,
		"digest": `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + esc + `","size":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			lay := filepath.Join(t.TempDir(), "layout")
			writeLayout(t, lay, img)
			os.WriteFile(filepath.Join(lay, "index.json"), []byte(index), 0o644)
			putBlob(t, lay, raw, v1.Hash{})
			_, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{})
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			t.Logf("error: %s", msg)
			if strings.ContainsAny(msg, "\x1b\a\n") {
				t.Errorf("raw control characters in %q", msg)
			}
			if name == "platforms" && !strings.Contains(msg, `"linux, linux/amd64/x"`) {
				t.Errorf("a platform with a list separator is not quoted: %q", msg)
			}
		})
	}

	t.Run("media type", func(t *testing.T) {
		lay := filepath.Join(t.TempDir(), "layout")
		writeLayout(t, lay, img)
		mb := []byte(`{"schemaVersion":2,"mediaType":"application/x` + esc + `","config":{"digest":"` + d.String() + `","size":1}}`)
		md := putBlob(t, lay, mb, v1.Hash{})
		editIndex(t, lay, func(im *v1.IndexManifest) { im.Manifests[0].Digest = md })
		_, err := openStore(t, t.TempDir()).Get(context.Background(), lay, Options{})
		oneLineError(t, err, `media type "application/x\x1b]0;pwned\a\x1b[2J"`)
	})
}

// The cache is private to its user: Open makes it so (tightening a cache
// an older smol left 0755), and what the store writes stays so.
func TestStoreIsPrivate(t *testing.T) {
	reg := newRegistry(t)
	ref := reg.push(t, "test/private:v1", image(t, "amd64", v1.Config{}, layer(t, file("a", "a"))))
	lay := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, lay, image(t, "amd64", v1.Config{}, layer(t, file("b", "b"))))
	layTar := lay + ".tar"
	tarDir(t, lay, layTar)

	home := filepath.Join(t.TempDir(), "new", "home")
	s := openStore(t, home)
	get(t, s, ref, Options{})
	get(t, s, lay, Options{})
	get(t, s, layTar, Options{})
	for _, d := range []string{home, filepath.Dir(home)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s created with mode %v", d, fi.Mode().Perm())
		}
	}
	checkPrivate := func() {
		t.Helper()
		n := 0
		filepath.WalkDir(s.root, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				t.Error(err)
				return nil
			}
			fi, _ := de.Info()
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s is %v, open to other users", p, fi.Mode().Perm())
			}
			n++
			return nil
		})
		if n < 10 {
			t.Errorf("walked only %d paths", n)
		}
	}
	checkPrivate()

	// A cache as an older smol left it: everything 0755/0644.
	filepath.WalkDir(s.root, func(p string, de fs.DirEntry, err error) error {
		if de.IsDir() {
			os.Chmod(p, 0o755)
		} else {
			os.Chmod(p, 0o644)
		}
		return nil
	})
	s = openStore(t, home)
	for _, d := range []string{s.root, filepath.Join(s.root, "sha256"), filepath.Join(s.root, "tmp")} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
			t.Errorf("Open left %s at %v", d, fi.Mode().Perm())
		}
	}
	// Rewritten files are private again.
	if err := s.Remove(ref); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(s.refsPath()); fi.Mode().Perm() != 0o600 {
		t.Errorf("refs.json rewritten %v", fi.Mode().Perm())
	}
}

// An older smol keyed local sources in the registry's key space, so an
// entry a local ref points to there may be a layout's content under a
// registry digest. Open drops it, and the registry ref pulls afresh.
func TestLegacySharedEntryIsDropped(t *testing.T) {
	_, ref, trusted := trustedRegistryImage(t)
	home := t.TempDir()
	s := openStore(t, home)
	img := get(t, s, ref, Options{})
	// What an older smol wrote after reading a layout claiming that digest.
	if err := s.updateRefs(func(idx *refIndex) {
		idx.Refs[refKey("/home/u/evil-layout", DefaultPlatform)] = refRecord{Ref: "/home/u/evil-layout", Digest: img.Digest, Platform: DefaultPlatform}
	}); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, home)
	if _, err := os.Stat(img.Disk); !os.IsNotExist(err) {
		t.Errorf("shared legacy entry kept")
	}
	idx, _ := s.loadRefs()
	if len(idx.Refs) != 0 {
		t.Errorf("refs kept: %+v", idx.Refs)
	}
	again := get(t, s, ref, Options{})
	if s.Downloads() == 0 {
		t.Errorf("registry ref answered without pulling again")
	}
	if again.Digest != digestOf(t, trusted).String() || catExt4(t, again.Disk, "/who") != "registry" {
		t.Errorf("re-pulled %+v", again)
	}
	// A clean store is left alone.
	s = openStore(t, home)
	if _, err := os.Stat(again.Disk); err != nil {
		t.Errorf("registry entry removed by a clean Open: %v", err)
	}
}

// A registry's own error text (go-containerregistry quotes the body's
// messages verbatim) reaches the message escaped.
func TestRegistryErrorTextIsEscaped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"errors":[{"code":"DENIED","message":"\u001b]0;pwned\u0007\u001b[2J\nsmol: all good"}]}`)
	}))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/x/y:z"
	_, err := openStore(t, t.TempDir()).Get(context.Background(), ref, Options{})
	if err == nil {
		t.Fatal("accepted")
	}
	t.Logf("error: %s", err)
	if strings.ContainsAny(err.Error(), "\x1b\a\n") {
		t.Errorf("raw control characters in %q", err)
	}
	if !strings.Contains(err.Error(), `\x1b]0;pwned\a`) {
		t.Errorf("the registry's message is lost: %q", err)
	}
}

// A compressed docker-save layer's diff ID comes from the (hashed) config,
// not from decompressing the layer before the build: the build checks it
// while streaming, under its limits, and a bomb costs nothing earlier.
func TestDockerSaveDiffIDFromConfig(t *testing.T) {
	want := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ef", 32)}
	cfg, _ := json.Marshal(v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{want}}})
	// A gzip header, then bytes no decompressor gets through.
	bomb := append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, bytes.Repeat([]byte{0xff}, 64)...)
	saved := filepath.Join(t.TempDir(), "saved.tar")
	os.WriteFile(saved, tarFiles(t,
		[2]string{"config.json", string(cfg)},
		[2]string{"layer.tar.gz", string(bomb)},
		[2]string{"manifest.json", `[{"Config":"config.json","Layers":["layer.tar.gz"]}]`}), 0o644)
	s := openStore(t, t.TempDir())
	src, err := s.resolve(context.Background(), saved, Options{Platform: DefaultPlatform})
	if err != nil {
		t.Fatal(err)
	}
	defer src.close()
	img, err := src.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers %v: %v", ls, err)
	}
	if got, err := ls[0].DiffID(); err != nil || got != want {
		t.Errorf("DiffID = %s, %v; want the config's %s without reading the layer", got, err, want)
	}
	if _, err := s.Get(context.Background(), saved, Options{}); err == nil {
		t.Error("a corrupt layer was built")
	}
}
