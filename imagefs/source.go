package imagefs

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	kind     sourceKind
	key      string  // ref index key
	digest   v1.Hash // cache key
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
		return nil, fmt.Errorf("%s: not a container image (media type %s)", r, desc.MediaType)
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
		return fmt.Errorf("registry %s: %s: %w", reg, r, err)
	}
	var oe *net.OpError
	var de *net.DNSError
	var tlsErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &tlsErr):
		return fmt.Errorf("registry %s: TLS certificate not trusted (use --insecure to skip verification): %v", reg, tlsErr)
	case errors.As(err, &de):
		return fmt.Errorf("registry %s unreachable: %v", reg, de)
	case errors.As(err, &oe):
		return fmt.Errorf("registry %s unreachable: %v", reg, oe)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("registry %s unreachable: no answer within %s", reg, registryTimeout)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("registry %s unreachable: %v", reg, err)
	}
	return fmt.Errorf("registry %s: %s: %w", reg, r, err)
}

// pickPlatform chooses the manifest for want from an index. Entries without
// a platform (attestations use unknown/unknown) never match.
func pickPlatform(what string, ms []v1.Descriptor, want v1.Platform) (v1.Descriptor, error) {
	var have []string
	var match *v1.Descriptor
	for i, m := range ms {
		p := m.Platform
		if p == nil || p.OS == "unknown" {
			continue
		}
		have = append(have, p.String())
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
		return v1.Descriptor{}, fmt.Errorf("%s: no %s image; the index has %s", what, want.String(), strings.Join(have, ", "))
	}
	if match.MediaType.IsIndex() {
		return v1.Descriptor{}, fmt.Errorf("%s: nested image indexes are not supported", what)
	}
	return *match, nil
}

// --- local sources ---

// resolveTarball handles `docker save` output (manifest.json) and OCI-layout
// tarballs (index.json/oci-layout, unpacked to scratch space and read as a
// layout directory).
func (s *Store) resolveTarball(file string, o Options) (src *source, err error) {
	abs, size, mtime, ok := localStamp(file)
	if !ok {
		return nil, fmt.Errorf("%s: cannot read", file)
	}
	defer func() {
		if src != nil {
			src.stampSize, src.stampMtime = size, mtime
		}
	}()
	kind, err := sniffTarball(abs)
	if err != nil {
		return nil, err
	}
	if kind == kindLayout {
		dir, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "layout-")
		if err != nil {
			return nil, err
		}
		if err := untarLayout(abs, dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		src, err := s.resolveLayoutDir(dir, abs, o)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		src.cleanup = append(src.cleanup, func() { os.RemoveAll(dir) })
		return src, nil
	}
	img, err := tarball.ImageFromPath(abs, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: reading docker-save archive: %w", file, err)
	}
	// The manifest of a docker-save archive is synthesised and needs every
	// layer compressed to compute; the config digest (the image ID) is just
	// as unique and free.
	digest, err := img.ConfigName()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &source{
		kind:     kindDockerArchive,
		sizeHint: fileSize(abs),
		key:      refKey(abs, o.Platform),
		digest:   digest,
		platform: o.Platform,
		open:     func(context.Context) (v1.Image, error) { return img, nil },
	}, nil
}

// sniffTarball looks at the member names of a tar file.
func sniffTarball(file string) (sourceKind, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var magic [4]byte
	if n, _ := io.ReadFull(f, magic[:]); n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return 0, fmt.Errorf("%s: compressed archive; decompress it first (gunzip)", file)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	tr := tar.NewReader(f)
	layoutish := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: not a tar archive: %w", file, err)
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
// tarball below dir. os.Root keeps hostile names inside dir.
func untarLayout(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	buf := make([]byte, 1<<20)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if !filepath.IsLocal(n) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(n, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(path.Dir(n), 0o755); err != nil {
				return err
			}
			w, err := root.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
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
// the ref index.
func (s *Store) resolveLayoutDir(dir, keyPath string, o Options) (*source, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, fmt.Errorf("%s: not an OCI image layout (no index.json)", keyPath)
	}
	abs, err := filepath.Abs(keyPath)
	if err != nil {
		return nil, err
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	want, _ := v1.ParsePlatform(o.Platform)
	desc, img, err := pickLayoutImage(keyPath, idx, *want)
	if err != nil {
		return nil, err
	}
	return &source{
		kind:     kindLayout,
		key:      refKey(abs, o.Platform),
		digest:   desc.Digest,
		platform: o.Platform,
		open:     func(context.Context) (v1.Image, error) { return img, nil },
	}, nil
}

// pickLayoutImage flattens nested indexes; a lone image is taken whatever
// its platform annotation says, several are chosen by platform.
func pickLayoutImage(what string, idx v1.ImageIndex, want v1.Platform) (v1.Descriptor, v1.Image, error) {
	var images []v1.Descriptor
	var walk func(v1.ImageIndex, int) error
	walk = func(ii v1.ImageIndex, depth int) error {
		im, err := ii.IndexManifest()
		if err != nil {
			return err
		}
		for _, d := range im.Manifests {
			switch {
			case d.MediaType.IsImage():
				images = append(images, d)
			case d.MediaType.IsIndex() && depth < 4:
				child, err := ii.ImageIndex(d.Digest)
				if err != nil {
					return err
				}
				if err := walk(child, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(idx, 0); err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	var d v1.Descriptor
	switch {
	case len(images) == 0:
		return v1.Descriptor{}, nil, fmt.Errorf("%s: the layout holds no image", what)
	case len(images) == 1 && (images[0].Platform == nil || images[0].Platform.OS == ""):
		d = images[0]
	default:
		var err error
		if d, err = pickPlatform(what, images, want); err != nil {
			return v1.Descriptor{}, nil, err
		}
	}
	img, err := layoutImage(idx, d.Digest, 0)
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	return d, img, nil
}

// layoutImage finds image h in idx or its children.
func layoutImage(idx v1.ImageIndex, h v1.Hash, depth int) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Digest == h && d.MediaType.IsImage() {
			return idx.Image(h)
		}
	}
	for _, d := range im.Manifests {
		if d.MediaType.IsIndex() && depth < 4 {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := layoutImage(child, h, depth+1); err == nil {
				return img, nil
			}
		}
	}
	return nil, fmt.Errorf("image %s not found in layout", h)
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
