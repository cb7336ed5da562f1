package imagefs

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Fuzz targets for what a local source feeds the parsers: a layout's
// index.json and blobs, a manifest on its own, a docker-save archive. Each
// asserts no panic and, for whatever is accepted, that every byte served as
// metadata hashes to the digest that names it, within maxMetaBytes.
//
//	go test -run '^$' -fuzz FuzzReadLayout ./imagefs/

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func hashOf(b []byte) v1.Hash { return v1.Hash{Algorithm: "sha256", Hex: sha256Hex(b)} }

// memBlobs serves blobs from memory; liars maps digests to content that
// does not hash to them, as a forged layout's blobs directory would.
func memBlobs(blobs [][]byte, liars map[string][]byte) blobStore {
	m := map[string][]byte{}
	for _, b := range blobs {
		m[sha256Hex(b)] = b
	}
	for h, b := range liars {
		m[h] = b
	}
	get := func(h v1.Hash) ([]byte, error) {
		b, ok := m[h.Hex]
		if !ok {
			return nil, fs.ErrNotExist
		}
		return b, nil
	}
	return blobStore{
		meta: get,
		open: func(h v1.Hash) (io.ReadCloser, error) {
			b, err := get(h)
			if err != nil {
				return nil, err
			}
			return io.NopCloser(bytes.NewReader(b)), nil
		},
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// layoutSeeds returns index.json documents and blobs for the seed corpus:
// an honest layout, a nested one, a multi-platform one, and the victim
// digest that a forged one claims.
func layoutSeeds(f *testing.F) (victim v1.Hash, seeds [][4][]byte) {
	trusted := image(f, "amd64", v1.Config{Cmd: []string{"/trusted"}}, layer(f, file("who", "registry")))
	evil := image(f, "amd64", v1.Config{Cmd: []string{"/evil"}}, layer(f, file("who", "layout")))
	victim = digestOf(f, trusted)
	raw, _ := evil.RawManifest()
	cfg, _ := evil.RawConfigFile()
	md := v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: hashOf(raw), Size: int64(len(raw))}
	index := func(ds ...v1.Descriptor) []byte {
		return mustJSON(f, v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ds})
	}
	honest := index(md)
	child := honest
	nested := index(v1.Descriptor{MediaType: types.OCIImageIndex, Digest: hashOf(child), Size: int64(len(child))})
	amd, arm := md, md
	amd.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	arm.Platform = &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
	multi := index(arm, amd)
	forged := md
	forged.Digest = victim
	return victim, [][4][]byte{
		{honest, raw, cfg, nil},
		{nested, child, raw, cfg},
		{multi, raw, cfg, nil},
		{index(forged), raw, cfg, nil},
		{[]byte(`{"schemaVersion":2,"manifests":[]}`), nil, nil, nil},
		{[]byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:x"}]}`), nil, nil, nil},
	}
}

func FuzzReadLayout(f *testing.F) {
	victim, seeds := layoutSeeds(f)
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	want := v1.Platform{OS: "linux", Architecture: "amd64"}
	f.Fuzz(func(t *testing.T, index, a, b, c []byte) {
		// The victim digest serves a's bytes: a forged manifest.
		bs := memBlobs([][]byte{a, b, c}, map[string][]byte{victim.Hex: a})
		li, err := readLayout(index, bs, want)
		if err != nil {
			return
		}
		if len(li.manifest) > maxMetaBytes || len(li.config) > maxMetaBytes {
			t.Fatalf("accepted %d manifest bytes and %d config bytes", len(li.manifest), len(li.config))
		}
		if got := hashOf(li.manifest); got != li.desc.Digest {
			t.Fatalf("accepted a manifest hashing to %s as %s", got, li.desc.Digest)
		}
		if got := hashOf(li.config); got != li.m.Config.Digest {
			t.Fatalf("accepted a config hashing to %s as %s", got, li.m.Config.Digest)
		}
		// What the build sees of it, through go-containerregistry.
		img, err := partial.CompressedToImage(li)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := img.Digest(); err != nil || d != li.desc.Digest {
			t.Fatalf("image digest %s (%v), want %s", d, err, li.desc.Digest)
		}
		if d, err := img.ConfigName(); err != nil || d != li.m.Config.Digest {
			t.Fatalf("config name %s (%v), want %s", d, err, li.m.Config.Digest)
		}
		if _, err := img.ConfigFile(); err != nil {
			t.Fatalf("accepted config does not decode: %v", err)
		}
		if ls, err := img.Layers(); err == nil {
			for _, l := range ls {
				l.Digest()
				l.Size()
				l.MediaType()
			}
		}
	})
}

// FuzzParseManifest feeds one document to both metadata decoders.
func FuzzParseManifest(f *testing.F) {
	_, seeds := layoutSeeds(f)
	for _, s := range seeds {
		for _, b := range s {
			if b != nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","config":{}}`))
	f.Add([]byte(`{"schemaVersion":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := parseImageManifest(b); err == nil {
			if m.SchemaVersion != 2 || (m.MediaType != "" && !m.MediaType.IsImage()) {
				t.Fatalf("accepted manifest %+v", m)
			}
		}
		if im, err := parseIndex(b); err == nil && im.SchemaVersion != 2 {
			t.Fatalf("accepted index %+v", im)
		}
	})
}

// dockerSaveTar builds a docker-save archive: manifest.json, config.json,
// layer.tar, and a link member if linkName is not empty.
func dockerSaveTar(manifest, config, layerTar []byte, linkName, linkTarget string, hard bool) ([]byte, bool) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) bool {
		h.Mode = 0o644
		if tw.WriteHeader(h) != nil {
			return false
		}
		_, err := tw.Write(body)
		return err == nil
	}
	ok := add(&tar.Header{Name: "config.json", Typeflag: tar.TypeReg, Size: int64(len(config))}, config) &&
		add(&tar.Header{Name: "layer.tar", Typeflag: tar.TypeReg, Size: int64(len(layerTar))}, layerTar)
	if ok && linkName != "" {
		typ := byte(tar.TypeSymlink)
		if hard {
			typ = tar.TypeLink
		}
		ok = add(&tar.Header{Name: linkName, Typeflag: typ, Linkname: linkTarget}, nil)
	}
	ok = ok && add(&tar.Header{Name: "manifest.json", Typeflag: tar.TypeReg, Size: int64(len(manifest))}, manifest)
	return buf.Bytes(), ok && tw.Close() == nil
}

func FuzzReadDockerSave(f *testing.F) {
	l := layer(f, file("hello", "from a tarball"))
	diffID, _ := l.DiffID()
	rc, _ := l.Uncompressed()
	layerTar, _ := io.ReadAll(rc)
	rc.Close()
	cfg := mustJSON(f, v1.ConfigFile{OS: "linux", Architecture: "amd64",
		RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}}, Config: v1.Config{Cmd: []string{"/hello"}}})
	trusted := image(f, "amd64", v1.Config{}, layer(f, file("who", "registry")))
	raw, _ := trusted.RawManifest()
	for _, s := range []struct {
		manifest, config   string
		linkName, linkDest string
		hard               bool
	}{
		{`[{"Config":"config.json","RepoTags":["x:1"],"Layers":["layer.tar"]}]`, string(cfg), "", "", false},
		{`[{"Config":"cfg","Layers":["l/layer.tar"]}]`, string(cfg), "cfg", "config.json", false},
		{`[{"Config":"config.json","Layers":["l/layer.tar"]}]`, string(cfg), "l/layer.tar", "../layer.tar", true},
		{`[{"Config":"loop","Layers":[]}]`, "{}", "loop", "loop", false},
		{`[{"Config":"config.json","Layers":[]}]`, string(raw), "", "", false},
		{`[{"Config":"` + sha256Hex(cfg) + `.json","Layers":["layer.tar"]}]`, string(cfg), sha256Hex(cfg) + ".json", "config.json", false},
		{`[]`, "", "", "", false},
	} {
		f.Add([]byte(s.manifest), []byte(s.config), s.linkName, s.linkDest, s.hard)
	}
	f.Fuzz(func(t *testing.T, manifest, config []byte, linkName, linkTarget string, hard bool) {
		b, ok := dockerSaveTar(manifest, config, layerTar, linkName, linkTarget, hard)
		if !ok {
			return
		}
		open := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		img, digest, err := readDockerSave(tarball.Opener(open))
		if err != nil {
			return
		}
		raw, err := img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > maxMetaBytes {
			t.Fatalf("accepted a %d-byte config", len(raw))
		}
		if got := hashOf(raw); got != digest {
			t.Fatalf("keyed by %s, but the config the build reads hashes to %s", digest, got)
		}
		if cf, err := img.ConfigFile(); err == nil {
			_ = cf.Config
		}
		if ls, err := img.Layers(); err == nil {
			for _, l := range ls {
				l.DiffID()
				if rc, err := l.Uncompressed(); err == nil {
					io.Copy(io.Discard, io.LimitReader(rc, 1<<20))
					rc.Close()
				}
			}
		}
	})
}
