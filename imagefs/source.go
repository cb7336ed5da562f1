package imagefs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/smolvm/smol/internal/termsafe"
)

// Timeouts for registry access. They bound how long a command waits on an
// unreachable or stuck registry; layer downloads are not limited in total,
// only by stallTimeout without progress.
var (
	registryTimeout = 30 * time.Second // manifest resolution
	dialTimeout     = 10 * time.Second
	stallTimeout    = 60 * time.Second // no bytes of a layer for this long
)

type sourceKind int

const (
	kindRemote sourceKind = iota
	kindDockerArchive
	kindLayout
)

// source is a resolved image: its cache key and a way to open it for the
// build.
type source struct {
	kind sourceKind
	key  string // ref index key
	// digest is the cache key: the manifest digest of a registry image; for
	// a local source its verified digest in a key space of its own, carried
	// in Algorithm (see entryDir), so that its String() never equals a
	// registry image's whatever the file claims.
	digest   v1.Hash
	platform string
	sizeHint int64 // bytes the unpacked image may need; 0 = estimate from the manifest
	// stampSize/stampMtime identify the version of a local tarball.
	stampSize, stampMtime int64
	// open returns the image; ctx bounds the whole build (remote layers are
	// fetched under it).
	open    func(ctx context.Context) (v1.Image, error)
	cleanup []func()
}

func (s *source) close() {
	for _, f := range s.cleanup {
		f()
	}
}

// isLocal reports whether ref names an existing file or directory, which
// takes precedence over registry refs (so "./img.tar" and "img.tar" work).
func isLocal(ref string) bool {
	_, err := os.Stat(ref)
	return err == nil
}

// looksLikePath reports a ref that can only have meant a local file: an
// absolute or ./ ../ path, or a tarball's name. Reporting it missing beats
// asking Docker Hub for an image called "/tmp/img.tar".
func looksLikePath(ref string) bool {
	return strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "./") || strings.HasPrefix(ref, "../") ||
		strings.HasSuffix(ref, ".tar") || strings.HasSuffix(ref, ".tar.gz") || strings.HasSuffix(ref, ".tgz")
}

func parseRemote(ref string, o Options) (name.Reference, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("%q is neither a local file/directory nor a valid image reference: %w", ref, err)
	}
	return r, nil
}

func (s *Store) resolve(ctx context.Context, ref string, o Options) (*source, error) {
	fi, err := os.Stat(ref)
	switch {
	case err == nil && fi.IsDir():
		return s.resolveLayoutDir(ref, ref, o)
	case err == nil && fi.Mode().IsRegular():
		return s.resolveTarball(ref, o)
	case err == nil:
		return nil, fmt.Errorf("%s: not a regular file or directory", ref)
	case looksLikePath(ref):
		return nil, fmt.Errorf("%s: no such file or directory", ref)
	}
	r, err := parseRemote(ref, o)
	if err != nil {
		return nil, err
	}
	return s.resolveRemote(ctx, r, o)
}

// --- registries ---

func newTransport(insecure bool) http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = dialTimeout
	t.ResponseHeaderTimeout = registryTimeout
	if insecure {
		c := t.TLSClientConfig
		if c == nil {
			c = &tls.Config{}
		} else {
			c = c.Clone()
		}
		c.InsecureSkipVerify = true
		t.TLSClientConfig = c
	}
	return t
}

func remoteOptions(ctx context.Context, o Options) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(newTransport(o.Insecure)),
		remote.WithUserAgent("smol"),
		remote.WithRetryBackoff(remote.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3}),
	}
}

func (s *Store) resolveRemote(ctx context.Context, r name.Reference, o Options) (*source, error) {
	want, _ := v1.ParsePlatform(o.Platform)
	rctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	desc, err := remote.Get(r, remoteOptions(rctx, o)...)
	if err != nil {
		return nil, registryError(r, err)
	}
	digest := desc.Digest
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, registryError(r, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, registryError(r, err)
		}
		d, err := pickPlatform(r.String(), im.Manifests, *want)
		if err != nil {
			return nil, err
		}
		digest = d.Digest
	} else if !desc.MediaType.IsImage() {
		return nil, fmt.Errorf("%s: not a container image (media type %q)", r, string(desc.MediaType))
	}
	dref := r.Context().Digest(digest.String())
	return &source{
		kind:     kindRemote,
		key:      refKey(r.Name(), o.Platform),
		digest:   digest,
		platform: o.Platform,
		open: func(ctx context.Context) (v1.Image, error) {
			img, err := remote.Image(dref, remoteOptions(ctx, o)...)
			if err != nil {
				return nil, registryError(r, err)
			}
			return img, nil
		},
	}, nil
}

// registryError turns go-containerregistry errors into one clear line.
func registryError(r name.Reference, err error) error {
	reg := r.Context().RegistryStr()
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("image %s not found in registry %s", r, reg)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("registry %s denied access to %s (it may not exist, or need `docker login %s`)", reg, r, reg)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return fmt.Errorf("image %s not found in registry %s", r, reg)
			}
		}
		return fmt.Errorf("registry %s: %s: %w", reg, r, safeError{err})
	}
	var oe *net.OpError
	var de *net.DNSError
	var tlsErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &tlsErr):
		return fmt.Errorf("registry %s: TLS certificate not trusted (use --insecure to skip verification): %v", reg, safeError{tlsErr})
	case errors.As(err, &de):
		return fmt.Errorf("registry %s unreachable: %v", reg, safeError{de})
	case errors.As(err, &oe):
		return fmt.Errorf("registry %s unreachable: %v", reg, safeError{oe})
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("registry %s unreachable: no answer within %s", reg, registryTimeout)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("registry %s unreachable: %v", reg, safeError{err})
	}
	return fmt.Errorf("registry %s: %s: %w", reg, r, safeError{err})
}

// maxListedPlatforms bounds the platforms an error message lists: an index
// can hold thousands.
const maxListedPlatforms = 16

// pickPlatform chooses the manifest for want from an index. Entries without
// a platform (attestations use unknown/unknown) never match. The index
// chose the platform strings, so the error lists each once, quoted unless
// it is a plain token (imageText), and at most maxListedPlatforms of them.
func pickPlatform(what string, ms []v1.Descriptor, want v1.Platform) (v1.Descriptor, error) {
	var have []string
	var match *v1.Descriptor
	for i, m := range ms {
		p := m.Platform
		if p == nil || p.OS == "unknown" {
			continue
		}
		if t := imageText(p.String()); !slices.Contains(have, t) && len(have) <= maxListedPlatforms {
			have = append(have, t)
		}
		if p.OS != want.OS || p.Architecture != want.Architecture {
			continue
		}
		if want.Variant != "" && p.Variant != want.Variant && !(want.Architecture == "arm64" && p.Variant == "" && want.Variant == "v8") {
			continue
		}
		if match == nil || (want.Variant == "" && p.Variant == "" && match.Platform.Variant != "") {
			match = &ms[i]
		}
	}
	if match == nil {
		if len(have) == 0 {
			return v1.Descriptor{}, fmt.Errorf("%s: image index lists no platforms (need %s)", what, want.String())
		}
		if len(have) > maxListedPlatforms {
			have = append(have[:maxListedPlatforms], "…")
		}
		return v1.Descriptor{}, fmt.Errorf("%s: no %s image; the index has %s", what, want.String(), strings.Join(have, ", "))
	}
	if match.MediaType.IsIndex() {
		return v1.Descriptor{}, fmt.Errorf("%s: nested image indexes are not supported", what)
	}
	return *match, nil
}

// --- local sources ---
//
// A local source is hostile input like any image: whoever wrote the file
// chose every byte of it, including the digests in its index.json and
// manifest.json. Nothing go-containerregistry's layout and tarball readers
// return is checked against those digests, so the metadata is read here:
// each piece capped at maxMetaBytes before it is decoded, and each blob
// hashed against the digest that names it (index.json → nested indexes and
// the manifest, manifest → config). Layers are hashed by the build while
// they stream. Local entries have their own cache key spaces (entryDir).

// maxMetaBytes caps every piece of a local source's metadata read into
// memory: index.json, nested indexes, the manifest, the config, a
// docker-save manifest.json. Real ones are kilobytes (a config with a long
// history tens of them); the cap keeps a hostile file from costing memory
// in proportion to its size.
const maxMetaBytes = 4 << 20

// Bounds on a layout's tree of indexes. A verified index cannot contain
// itself, but one can list the same child thousands of times.
const (
	maxIndexDepth    = 4
	maxNestedIndexes = 64
)

// maxLinkHops bounds the symlink and hardlink chain followed to a member of
// a docker-save archive (go-containerregistry rescans the archive for every
// hop, so a long chain costs quadratic time).
const maxLinkHops = 8

func errTooBig(what string) error {
	return fmt.Errorf("%s is larger than %d MiB", what, maxMetaBytes>>20)
}

// safeError shows an error's message escaped to one line of text
// (termsafe.Line) and still unwraps to it. The errors of parsers that read
// a local source, and of go-containerregistry talking to a registry, can
// carry bytes the file or the server chose, unquoted (v1.Hash reports a
// bad character with %c; a registry's error body is quoted verbatim), and
// those must reach a terminal as text, never as escape sequences or a line
// of their own.
type safeError struct{ err error }

func (e safeError) Error() string { return termsafe.Line(e.err.Error()) }
func (e safeError) Unwrap() error { return e.err }

// imageText returns a short string an image chose (a platform) as is when
// it is a plain token, and quoted otherwise, so that it can neither carry
// control characters to a terminal nor pose as more than one item of a
// list in an error message.
func imageText(s string) string {
	if s == "" || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/:+-") != "" {
		return strconv.Quote(s)
	}
	return s
}

// parseError wraps the error of a parser that read image-chosen bytes.
func parseError(what string, err error) error {
	return fmt.Errorf("%s: %w", what, safeError{err})
}

// resolveTarball handles `docker save` output (manifest.json) and OCI-layout
// tarballs (index.json/oci-layout, unpacked to scratch space and read as a
// layout directory). The file is opened once and every later read goes
// through that descriptor, so what was checked is what is built even if
// the name is replaced meanwhile.
func (s *Store) resolveTarball(file string, o Options) (src *source, err error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read: %w", file, err)
	}
	defer func() {
		if src == nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: cannot read", file)
	}
	size := fi.Size()
	open := func() (io.ReadCloser, error) { return sectionCloser{io.NewSectionReader(f, 0, size)}, nil }
	defer func() {
		if src != nil {
			src.stampSize, src.stampMtime = size, fi.ModTime().UnixNano()
		}
	}()
	kind, err := sniffTarball(file, io.NewSectionReader(f, 0, size))
	if err != nil {
		return nil, err
	}
	if kind == kindLayout {
		dir, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "layout-")
		if err != nil {
			return nil, err
		}
		if err := untarLayout(io.NewSectionReader(f, 0, size), size, dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		f.Close()
		src, err := s.resolveLayoutDir(dir, abs, o)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		src.cleanup = append(src.cleanup, func() { os.RemoveAll(dir) })
		return src, nil
	}
	img, config, err := readDockerSave(open)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// The manifest of a docker-save archive is synthesised and needs every
	// layer compressed to compute; the config digest (the image ID), hashed
	// from the very bytes the build will use, is just as unique and free.
	return &source{
		kind:     kindDockerArchive,
		sizeHint: size,
		key:      refKey(abs, o.Platform),
		digest:   localKey(dockerSpace, config),
		platform: o.Platform,
		open:     func(context.Context) (v1.Image, error) { return img, nil },
		cleanup:  []func(){func() { f.Close() }},
	}, nil
}

// sectionCloser is an io.SectionReader an Opener can return: closing it
// leaves the shared file open, and it stays an io.Seeker, so tar readers
// skip members' data instead of reading it.
type sectionCloser struct{ *io.SectionReader }

func (sectionCloser) Close() error { return nil }

// sniffTarball looks at the member names of a tar file.
func sniffTarball(file string, r io.ReadSeeker) (sourceKind, error) {
	var magic [4]byte
	if n, _ := io.ReadFull(r, magic[:]); n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return 0, fmt.Errorf("%s: compressed archive; decompress it first (gunzip)", file)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	tr := tar.NewReader(r)
	layoutish := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: not a tar archive: %w", file, safeError{err})
		}
		switch path.Clean(h.Name) {
		case "manifest.json":
			return kindDockerArchive, nil
		case "index.json", "oci-layout":
			layoutish = true
		}
	}
	if layoutish {
		return kindLayout, nil
	}
	return 0, fmt.Errorf("%s: neither a docker-save archive (manifest.json) nor an OCI layout (index.json)", file)
}

// untarLayout extracts the regular files and directories of an OCI-layout
// tarball of size bytes below dir, privately. os.Root keeps hostile names
// inside dir; no more than the archive's own size is written, which only a
// sparse member could exceed.
func untarLayout(r io.Reader, size int64, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	buf := make([]byte, 1<<20)
	budget := size
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return parseError("reading the archive", err)
		}
		n := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if !filepath.IsLocal(n) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(n, privateDir); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size > budget {
				return fmt.Errorf("member %q unpacks to more than the archive's size", h.Name)
			}
			budget -= h.Size
			if err := root.MkdirAll(path.Dir(n), privateDir); err != nil {
				return err
			}
			w, err := root.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, privateFile)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(writerOnly{w}, tr, buf)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// resolveLayoutDir reads an OCI image layout directory; keyPath names it in
// the ref index and in messages.
func (s *Store) resolveLayoutDir(dir, keyPath string, o Options) (*source, error) {
	abs, err := filepath.Abs(keyPath)
	if err != nil {
		return nil, err
	}
	index, err := readMeta(filepath.Join(dir, "index.json"), "index.json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: not an OCI image layout (no index.json)", keyPath)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	want, _ := v1.ParsePlatform(o.Platform)
	li, err := readLayout(index, dirBlobs(dir), *want)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	img, err := partial.CompressedToImage(li)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	return &source{
		kind:     kindLayout,
		key:      refKey(abs, o.Platform),
		digest:   localKey(layoutSpace, li.desc.Digest),
		platform: o.Platform,
		open:     func(context.Context) (v1.Image, error) { return img, nil },
	}, nil
}

// blobStore reads the blobs of a layout: meta returns a blob's bytes
// (capped at maxMetaBytes, not yet verified), open streams a layer.
type blobStore struct {
	meta func(h v1.Hash) ([]byte, error)
	open func(h v1.Hash) (io.ReadCloser, error)
}

// dirBlobs reads blobs from <dir>/blobs/<algo>/<hex>. A v1.Hash decoded
// from JSON has a known algorithm and hex digits only, so the name stays
// inside blobs/.
func dirBlobs(dir string) blobStore {
	p := func(h v1.Hash) string { return filepath.Join(dir, "blobs", h.Algorithm, h.Hex) }
	return blobStore{
		meta: func(h v1.Hash) ([]byte, error) { return readMeta(p(h), "blob") },
		open: func(h v1.Hash) (io.ReadCloser, error) { return openRegular(p(h), "blob "+h.String()) },
	}
}

// openRegular opens a regular file for reading. O_NONBLOCK keeps a FIFO
// planted in a layout from hanging the open; the fstat then refuses it,
// and devices, before anything is read.
func openRegular(p, what string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", what)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// readMeta reads a whole regular file of at most maxMetaBytes.
func readMeta(p, what string) ([]byte, error) {
	f, err := openRegular(p, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxMetaBytes {
		return nil, errTooBig(what)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxMetaBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxMetaBytes {
		return nil, errTooBig(what)
	}
	return b, nil
}

// verifiedBlob returns the blob named h, checked to hash to h.
func verifiedBlob(bs blobStore, h v1.Hash, what string) ([]byte, error) {
	if h.Algorithm != "sha256" || !isSHA256Hex(h.Hex) {
		return nil, fmt.Errorf("%s: unsupported digest %q (want sha256)", what, h.String())
	}
	b, err := bs.meta(h)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, h, err)
	}
	if len(b) > maxMetaBytes {
		return nil, fmt.Errorf("%s %s: %w", what, h, errTooBig("blob"))
	}
	if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != h.Hex {
		return nil, fmt.Errorf("%s %s: content does not match its digest (it hashes to sha256:%x)", what, h, got)
	}
	return b, nil
}

// parseIndex decodes an image index: index.json or a nested index blob.
// Its errors are safe to print as they are (see safeError).
func parseIndex(b []byte) (*v1.IndexManifest, error) {
	if len(b) > maxMetaBytes {
		return nil, errTooBig("image index")
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, safeError{err}
	}
	if im.SchemaVersion != 2 {
		return nil, fmt.Errorf("unsupported image index schema version %d", im.SchemaVersion)
	}
	return im, nil
}

// parseImageManifest decodes an image manifest and refuses anything else
// posing as one (an index, a schema 1 manifest). Its errors are safe to
// print as they are.
func parseImageManifest(b []byte) (*v1.Manifest, error) {
	if len(b) > maxMetaBytes {
		return nil, errTooBig("manifest")
	}
	m, err := v1.ParseManifest(bytes.NewReader(b))
	if err != nil {
		return nil, safeError{err}
	}
	if m.SchemaVersion != 2 {
		return nil, fmt.Errorf("unsupported manifest schema version %d", m.SchemaVersion)
	}
	if m.MediaType != "" && !m.MediaType.IsImage() {
		return nil, fmt.Errorf("not an image manifest (media type %q)", string(m.MediaType))
	}
	return m, nil
}

// layoutImage is an image of a layout, read and verified by readLayout: it
// serves the bytes that were hashed, never a second read of the files, and
// implements partial.CompressedImageCore for go-containerregistry to fill
// in the rest of v1.Image.
type layoutImage struct {
	desc     v1.Descriptor // of the manifest, as index.json has it
	manifest []byte        // hashes to desc.Digest
	m        *v1.Manifest  // manifest, decoded
	config   []byte        // hashes to m.Config.Digest
	blobs    blobStore
}

func (li *layoutImage) RawManifest() ([]byte, error)   { return li.manifest, nil }
func (li *layoutImage) RawConfigFile() ([]byte, error) { return li.config, nil }

func (li *layoutImage) MediaType() (types.MediaType, error) {
	if li.m.MediaType != "" {
		return li.m.MediaType, nil
	}
	return li.desc.MediaType, nil
}

// LayerByDigest serves a layer the manifest lists; its bytes are hashed
// against the digest as the build streams them.
func (li *layoutImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range li.m.Layers {
		if d.Digest == h {
			return &layoutLayer{desc: d, blobs: li.blobs}, nil
		}
	}
	return nil, fmt.Errorf("layer %s is not in the manifest", h)
}

type layoutLayer struct {
	desc  v1.Descriptor
	blobs blobStore
}

func (l *layoutLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *layoutLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *layoutLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }
func (l *layoutLayer) Compressed() (io.ReadCloser, error)  { return l.blobs.open(l.desc.Digest) }

// readLayout picks the image for want from a layout's index.json and reads
// its manifest and config, each verified against the digest naming it.
// Nested indexes are flattened; a lone image is taken whatever its platform
// annotation says, several are chosen by platform.
func readLayout(index []byte, bs blobStore, want v1.Platform) (*layoutImage, error) {
	top, err := parseIndex(index)
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	var images []v1.Descriptor
	seen := map[v1.Hash]bool{}
	var walk func(*v1.IndexManifest, int) error
	walk = func(im *v1.IndexManifest, depth int) error {
		for _, d := range im.Manifests {
			switch {
			case d.MediaType.IsImage():
				images = append(images, d)
			case d.MediaType.IsIndex():
				if depth >= maxIndexDepth {
					return fmt.Errorf("image indexes nested more than %d deep", maxIndexDepth)
				}
				if seen[d.Digest] {
					continue
				}
				seen[d.Digest] = true
				if len(seen) > maxNestedIndexes {
					return fmt.Errorf("more than %d nested image indexes", maxNestedIndexes)
				}
				b, err := verifiedBlob(bs, d.Digest, "image index")
				if err != nil {
					return err
				}
				child, err := parseIndex(b)
				if err != nil {
					return fmt.Errorf("image index %s: %w", d.Digest, err)
				}
				if err := walk(child, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(top, 0); err != nil {
		return nil, err
	}
	var d v1.Descriptor
	switch {
	case len(images) == 0:
		return nil, errors.New("the layout holds no image")
	case len(images) == 1 && (images[0].Platform == nil || images[0].Platform.OS == ""):
		d = images[0]
	default:
		if d, err = pickPlatform("index.json", images, want); err != nil {
			return nil, err
		}
	}
	mb, err := verifiedBlob(bs, d.Digest, "manifest")
	if err != nil {
		return nil, err
	}
	m, err := parseImageManifest(mb)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	cb, err := verifiedBlob(bs, m.Config.Digest, "config")
	if err != nil {
		return nil, err
	}
	if _, err := v1.ParseConfigFile(bytes.NewReader(cb)); err != nil {
		return nil, parseError("config "+m.Config.Digest.String(), err)
	}
	return &layoutImage{desc: d, manifest: mb, m: m, config: cb, blobs: bs}, nil
}

// readDockerSave reads a `docker save` archive through open (which must
// yield the same bytes every time). manifest.json and the config are
// capped at maxMetaBytes, every member it names is checked to resolve to a
// regular file within maxLinkHops, a config named after a digest
// (<hex>.json, blobs/sha256/<hex>) must hash to it, and the digest returned
// is that of the config bytes go-containerregistry's image will serve.
func readDockerSave(open tarball.Opener) (v1.Image, v1.Hash, error) {
	mb, err := tarMember(open, "manifest.json", true)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("manifest.json: %w", err)
	}
	var m tarball.Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, v1.Hash{}, parseError("manifest.json", err)
	}
	if len(m) != 1 {
		return nil, v1.Hash{}, fmt.Errorf("manifest.json lists %d images; smol reads archives of exactly one", len(m))
	}
	d := m[0]
	cb, err := tarMember(open, d.Config, true)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("config %q: %w", d.Config, err)
	}
	sum := sha256.Sum256(cb)
	config := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if named := digestInName(d.Config); named != "" && named != config.Hex {
		return nil, v1.Hash{}, fmt.Errorf("config %q: content does not match the digest in its name (it hashes to %s)", d.Config, config)
	}
	for _, l := range d.Layers {
		if _, err := tarMember(open, l, false); err != nil {
			return nil, v1.Hash{}, fmt.Errorf("layer %q: %w", l, err)
		}
	}
	img, err := tarball.Image(open, nil)
	if err != nil {
		return nil, v1.Hash{}, parseError("reading docker-save archive", err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, v1.Hash{}, parseError("reading docker-save archive", err)
	}
	if !bytes.Equal(raw, cb) {
		return nil, v1.Hash{}, errors.New("the archive changed while it was read")
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, v1.Hash{}, parseError("config", err)
	}
	return &dockerImage{Image: img, diffIDs: cf.RootFS.DiffIDs}, config, nil
}

// dockerImage is a docker-save image whose layers report the diff IDs its
// config lists. go-containerregistry works out the diff ID of a compressed
// docker-save layer by decompressing all of it, before the build starts
// and with none of its limits, so a small gzip or zstd bomb would cost
// hours; the config (hashed: it is the cache key) says what each layer
// must unpack to, and the build checks exactly that as it streams.
type dockerImage struct {
	v1.Image
	diffIDs []v1.Hash
}

func (d *dockerImage) Layers() ([]v1.Layer, error) {
	ls, err := d.Image.Layers()
	if err != nil {
		return nil, err
	}
	if len(ls) != len(d.diffIDs) {
		return nil, fmt.Errorf("the archive holds %d layers but its config lists %d", len(ls), len(d.diffIDs))
	}
	out := make([]v1.Layer, len(ls))
	for i, l := range ls {
		out[i] = diffIDLayer{Layer: l, diffID: d.diffIDs[i]}
	}
	return out, nil
}

type diffIDLayer struct {
	v1.Layer
	diffID v1.Hash
}

func (l diffIDLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }

// digestInName returns the hex digest a docker-save member's name claims
// ("<hex>.json", "blobs/sha256/<hex>"), or "".
func digestInName(name string) string {
	base := strings.TrimSuffix(path.Base(name), ".json")
	if isSHA256Hex(base) {
		return base
	}
	return ""
}

// tarMember finds the member go-containerregistry's tarball reader would
// read for name: the first whose cleaned name matches, links followed
// relative to the directory of the name asked for. It must be a regular
// file; with read, its content (at most maxMetaBytes) is returned.
func tarMember(open tarball.Opener, name string, read bool) ([]byte, error) {
	for hop := 0; hop <= maxLinkHops; hop++ {
		rc, err := open()
		if err != nil {
			return nil, err
		}
		h, tr, err := findMember(rc, name)
		if err != nil {
			rc.Close()
			return nil, err
		}
		switch h.Typeflag {
		case tar.TypeSymlink, tar.TypeLink:
			rc.Close()
			name = path.Join(path.Dir(name), path.Clean(h.Linkname))
			continue
		case tar.TypeReg:
		default:
			rc.Close()
			return nil, fmt.Errorf("member %q is not a regular file", h.Name)
		}
		defer rc.Close()
		if !read {
			return nil, nil
		}
		if h.Size > maxMetaBytes {
			return nil, errTooBig("it")
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxMetaBytes+1))
		if err != nil {
			return nil, parseError("reading the archive", err)
		}
		if len(b) > maxMetaBytes {
			return nil, errTooBig("it")
		}
		return b, nil
	}
	return nil, fmt.Errorf("more than %d links to follow", maxLinkHops)
}

// findMember scans a tar stream to the first member named name (cleaned).
func findMember(r io.Reader, name string) (*tar.Header, *tar.Reader, error) {
	want := path.Clean(name)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, nil, fmt.Errorf("%q not found in the archive", name)
		}
		if err != nil {
			return nil, nil, parseError("reading the archive", err)
		}
		if path.Clean(h.Name) == want {
			return h, tr, nil
		}
	}
}
