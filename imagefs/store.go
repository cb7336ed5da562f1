package imagefs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ErrNotCached is returned (wrapped, with the ref in the message) by Get with
// PullNever when the image is not in the cache.
var ErrNotCached = errors.New("image not cached")

// PullPolicy says when Get may contact a registry.
type PullPolicy string

// Pull policies. They govern registry access only: local sources (tarballs
// and OCI-layout directories) are always read, because reading them is
// cheap and involves no network.
const (
	PullMissing PullPolicy = "missing" // use the cache when the ref is known, else pull
	PullAlways  PullPolicy = "always"  // always fetch the manifest (layers only if the digest changed)
	PullNever   PullPolicy = "never"   // cache only; ErrNotCached otherwise
)

// ParsePullPolicy parses a --pull flag value; "" means PullMissing.
func ParsePullPolicy(s string) (PullPolicy, error) {
	switch p := PullPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return PullMissing, nil
	case PullMissing, PullAlways, PullNever:
		return p, nil
	}
	return "", fmt.Errorf("invalid pull policy %q (want missing, always or never)", s)
}

// DefaultPlatform is the platform picked from multi-arch images when
// Options.Platform is empty.
const DefaultPlatform = "linux/amd64"

// Options tune Get and Pull.
type Options struct {
	Pull     PullPolicy // default PullMissing
	Progress io.Writer  // per-layer progress (bytes, rate); nil = quiet
	Insecure bool       // allow plain http / unverified TLS for the registry
	Platform string     // default DefaultPlatform
	Limits   Limits     // zero fields: from SMOL_MAX_IMAGE_SIZE / SMOL_MAX_IMAGE_ENTRIES, else the defaults
}

// Config is the part of the image configuration needed to run it.
type Config struct {
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	// Created is when the image was built, as its config says (the Unix
	// epoch when it does not, as in reproducible builds).
	Created time.Time `json:"created,omitzero"`
}

// Image is one cached image.
type Image struct {
	Ref     string    // as the user typed it ("" for an entry no ref points to)
	Digest  string    // "sha256:…" of the manifest (of the config for docker-save tarballs)
	Disk    string    // absolute path of the cached read-only ext4 image
	Size    int64     // bytes of the ext4 file
	Config  Config    // run configuration
	Created time.Time // when it was cached

	// key is the entry's cache key: Digest in the key space of where the
	// image came from (see entryDir). A registry image and a local source
	// with the same Digest are two entries, and two Images, with two keys.
	key string
}

// Store is an on-disk image cache rooted at <home>/images.
type Store struct {
	root      string // absolute <home>/images
	downloads atomic.Int64
}

// DefaultHome is $SMOL_HOME, else $XDG_DATA_HOME/smol, else
// ~/.local/share/smol.
func DefaultHome() string {
	if h := os.Getenv("SMOL_HOME"); h != "" {
		return h
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "smol")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".local", "share", "smol")
}

// Open opens (creating as needed) the image store under home and removes
// leftovers of interrupted pulls that nobody is working on.
func Open(home string) (*Store, error) {
	if home == "" {
		home = DefaultHome()
	}
	root, err := filepath.Abs(filepath.Join(home, "images"))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{root, filepath.Join(root, "sha256"), filepath.Join(root, "tmp")} {
		if err := makePrivateDir(d); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	// A store made by an older smol has its algorithm directories 0755;
	// the root alone being 0700 already shuts others out, these follow so
	// that no mode in the store says otherwise.
	des, _ := os.ReadDir(root)
	for _, de := range des {
		if de.IsDir() {
			if err := makePrivateDir(filepath.Join(root, de.Name())); err != nil {
				return nil, fmt.Errorf("image store: %w", err)
			}
		}
	}
	s := &Store{root: root}
	if err := s.dropLegacyLocalEntries(); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s.gc()
	return s, nil
}

// makePrivateDir creates dir (and missing parents) 0700, and takes group
// and other access away from one that exists: a cache made by an older
// smol, or by hand, must not stay readable (nor, worse, writable) by other
// users, who could read what this user runs or plant entries for it.
func makePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, privateDir); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, privateDir); err != nil {
			return fmt.Errorf("%s is open to other users and cannot be made private: %w", dir, err)
		}
	}
	return nil
}

// dropLegacyLocalEntries forgets what an older smol cached for local
// sources. It keyed them in the registry's key space, by the manifest
// digest a layout's index.json claimed (unchecked) or by a docker-save's
// config digest, so such an entry may hold a local file's content under a
// registry image's digest, and nothing on disk says who built it. Every entry a local ref points to in that space is removed,
// with all refs to it: the local source is read again (verified, into its
// own key space) and a registry ref pulls again, once.
func (s *Store) dropLegacyLocalEntries() error {
	idx, err := s.loadRefs()
	if err != nil {
		return nil // a corrupt index is reported where it is used
	}
	if len(idx.legacyLocalDigests()) == 0 {
		return nil
	}
	var doomed []string
	if err := s.updateRefs(func(idx *refIndex) {
		doomed = idx.legacyLocalDigests()
		for k, rec := range idx.Refs {
			if slices.Contains(doomed, rec.Digest) {
				delete(idx.Refs, k)
			}
		}
	}); err != nil {
		return err
	}
	for _, d := range doomed {
		if err := s.removeEntry(d); err != nil {
			return err
		}
	}
	return nil
}

// Downloads counts layer blobs fetched from a registry by this Store.
func (s *Store) Downloads() int { return int(s.downloads.Load()) }

// Get returns the image for ref, pulling it according to o.Pull.
func (s *Store) Get(ctx context.Context, ref string, o Options) (*Image, error) {
	o, err := o.normalize()
	if err != nil {
		return nil, err
	}
	if o.Pull == PullAlways {
		return s.Pull(ctx, ref, o)
	}
	if isLocal(ref) {
		// An unchanged tarball we have read before needs no second look.
		if abs, size, mtime, ok := localStamp(ref); ok {
			if idx, err := s.loadRefs(); err == nil {
				rec, ok := idx.Refs[refKey(abs, o.Platform)]
				if ok && isLocalKey(rec.Digest) && rec.SourceSize == size && rec.SourceMtime == mtime {
					if img, ok := s.entry(rec.Digest); ok {
						img.Ref = ref
						return img, nil
					}
				}
			}
		}
		return s.fetch(ctx, ref, o)
	}
	r, err := parseRemote(ref, o)
	if err != nil {
		return nil, err
	}
	if img, ok := s.fromIndex(refKey(r.Name(), o.Platform), ref); ok {
		return img, nil
	}
	if o.Pull == PullNever {
		return nil, fmt.Errorf("%w: %s (pull policy %q)", ErrNotCached, ref, PullNever)
	}
	return s.fetch(ctx, ref, o)
}

// Pull always fetches the manifest of ref (or reads the local source) and
// builds the root filesystem unless an entry for its digest is cached.
func (s *Store) Pull(ctx context.Context, ref string, o Options) (*Image, error) {
	o, err := o.normalize()
	if err != nil {
		return nil, err
	}
	return s.fetch(ctx, ref, o)
}

// fetch resolves ref to a digest and returns the cached entry, building it
// first when needed; the ref index is updated either way.
func (s *Store) fetch(ctx context.Context, ref string, o Options) (*Image, error) {
	src, err := s.resolve(ctx, ref, o)
	if err != nil {
		return nil, err
	}
	defer src.close()
	img, ok := s.entry(src.digest.String())
	if !ok {
		if img, err = s.build(ctx, src, o); err != nil {
			return nil, err
		}
	}
	if err := s.setRef(src, ref); err != nil {
		return nil, err
	}
	img.Ref = ref
	return img, nil
}

// fromIndex returns the cached image the ref index maps the registry ref
// key to, if the entry is still complete. It touches no network. Only an
// entry in the registry's key space can answer: a local source never
// decides what a registry reference runs.
func (s *Store) fromIndex(key, ref string) (*Image, bool) {
	idx, err := s.loadRefs()
	if err != nil {
		return nil, false
	}
	rec, ok := idx.Refs[key]
	if !ok || isLocalKey(rec.Digest) {
		return nil, false
	}
	img, ok := s.entry(rec.Digest)
	if !ok {
		return nil, false
	}
	img.Ref = ref
	return img, true
}

// List returns one Image per ref in the index whose entry is complete, plus
// one (with Ref "") per complete entry no ref points to.
func (s *Store) List() ([]Image, error) {
	entries, err := s.entries()
	if err != nil {
		return nil, err
	}
	idx, err := s.loadRefs()
	if err != nil {
		return nil, err
	}
	var out []Image
	used := map[string]bool{}
	for _, rec := range idx.Refs {
		img, ok := entries[rec.Digest]
		if !ok {
			continue
		}
		img.Ref = rec.Ref
		used[rec.Digest] = true
		out = append(out, img)
	}
	for k, img := range entries {
		if !used[k] {
			img.Ref = ""
			out = append(out, img)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ref != out[j].Ref {
			return out[i].Ref < out[j].Ref
		}
		return out[i].key < out[j].key
	})
	return out, nil
}

// Remove deletes a ref, or an entry by digest ("sha256:<hex>", "<hex>" or a
// unique prefix of at least 12 hex characters; "layout-sha256:…" or
// "docker-sha256:…" names only a local source's entry, where a registry
// image has the same digest). Removing a ref also removes its entry when no
// other ref points to it; removing a digest drops every ref pointing to it.
func (s *Store) Remove(ref string) error {
	idx, err := s.loadRefs()
	if err != nil {
		return err
	}
	// A ref first: as typed, or canonical.
	var keys []string
	for k, rec := range idx.Refs {
		if rec.Ref == ref || refName(k) == ref {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		canon := ""
		if isLocal(ref) {
			canon, _ = filepath.Abs(ref)
		} else if r, err := parseRemote(ref, Options{}); err == nil {
			canon = r.Name()
		}
		for k := range idx.Refs {
			if canon != "" && refName(k) == canon {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) > 0 {
		var digests []string
		if err := s.updateRefs(func(idx *refIndex) {
			for _, k := range keys {
				if rec, ok := idx.Refs[k]; ok {
					digests = append(digests, rec.Digest)
					delete(idx.Refs, k)
				}
			}
		}); err != nil {
			return err
		}
		idx, err := s.loadRefs()
		if err != nil {
			return err
		}
		for _, d := range digests {
			if !idx.pointsTo(d) {
				if err := s.removeEntry(d); err != nil {
					return err
				}
			}
		}
		return nil
	}
	d, err := s.matchDigest(ref)
	if err != nil {
		return err
	}
	if err := s.updateRefs(func(idx *refIndex) {
		for k, rec := range idx.Refs {
			if rec.Digest == d {
				delete(idx.Refs, k)
			}
		}
	}); err != nil {
		return err
	}
	return s.removeEntry(d)
}

// matchDigest finds the key of the one complete entry whose digest is (or
// starts with) q: a full digest, or at least 12 hex characters with or
// without "sha256:" (any key space) or a local key space's prefix (that
// space only).
func (s *Store) matchDigest(q string) (string, error) {
	space, hex, ok := strings.Cut(q, ":")
	if !ok {
		space, hex = "", q
	}
	if (space != "" && space != "sha256" && !isLocalSpace(space)) ||
		len(hex) < 12 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("no cached image %q (not a known ref, and not a digest or a prefix of ≥12 hex characters)", q)
	}
	entries, err := s.entries()
	if err != nil {
		return "", err
	}
	var found []string
	for k, img := range entries {
		if isLocalSpace(space) && !strings.HasPrefix(k, space+":") {
			continue
		}
		if strings.HasPrefix(strings.TrimPrefix(img.Digest, "sha256:"), hex) {
			found = append(found, k)
		}
	}
	sort.Strings(found)
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no cached image %q", q)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("digest %q is ambiguous: it names %s", q, strings.Join(found, ", "))
}

func (o Options) normalize() (Options, error) {
	p, err := ParsePullPolicy(string(o.Pull))
	if err != nil {
		return o, err
	}
	o.Pull = p
	if o.Platform == "" {
		o.Platform = DefaultPlatform
	}
	pl, err := v1.ParsePlatform(o.Platform)
	if err != nil || pl.OS == "" || pl.Architecture == "" {
		return o, fmt.Errorf("invalid platform %q (want os/arch[/variant], e.g. linux/amd64)", o.Platform)
	}
	o.Platform = pl.String()
	return o, nil
}

// entryMeta is config.json of a cache entry.
type entryMeta struct {
	Ref      string    `json:"ref"`
	Digest   string    `json:"digest"`
	Platform string    `json:"platform"`
	Config   Config    `json:"config"`
	Created  time.Time `json:"created"`
}

// Cache keys and their key spaces.
//
// An entry is keyed by the digest that names its content, qualified by
// where that digest came from:
//
//	sha256:<hex>         a registry image's manifest   <root>/sha256/<hex>
//	layout-sha256:<hex>  an OCI layout's manifest       <root>/sha256/layout-<hex>
//	docker-sha256:<hex>  a docker-save archive's config <root>/sha256/docker-<hex>
//
// A registry vouches for its digests (go-containerregistry checks what it
// serves against them); a local file is whatever its author wrote. Local
// sources are verified too (source.go hashes index.json's manifest and the
// manifest's config, and the build hashes every layer), but their entries
// still live apart: a docker-save config digest names a different document
// than a manifest digest (a config whose bytes are a registry manifest has
// that manifest's digest and builds another root filesystem), and the rule
// "a local file can never satisfy or replace a registry reference's entry"
// holds by construction, not by the care of each verifier. An image that
// arrives both ways is built twice, which is cheap next to trusting the
// wrong one.
//
// A key is what build.go knows as src.digest.String(), so for a local
// source the key space travels in v1.Hash's Algorithm; entryDir is the one
// place that maps keys to directories. All live under <root>/sha256, one
// directory Open makes private.
const (
	layoutSpace = "layout-sha256"
	dockerSpace = "docker-sha256"
)

// localSpaceDirs maps a local key space to its entries' name prefix.
var localSpaceDirs = map[string]string{layoutSpace: "layout-", dockerSpace: "docker-"}

func isLocalSpace(space string) bool { _, ok := localSpaceDirs[space]; return ok }

// isLocalKey reports whether key is a local source's (not a registry's).
func isLocalKey(key string) bool {
	space, _, _ := strings.Cut(key, ":")
	return isLocalSpace(space)
}

// localKey is the cache key of a local source whose content hashes to h.
func localKey(space string, h v1.Hash) v1.Hash { return v1.Hash{Algorithm: space, Hex: h.Hex} }

// isSHA256Hex reports 64 lowercase hex digits: all a directory name may
// take from a key.
func isSHA256Hex(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// entryDir is the directory of the entry with cache key key (see the key
// spaces above).
func (s *Store) entryDir(key string) (string, error) {
	space, hex, _ := strings.Cut(key, ":")
	if prefix, ok := localSpaceDirs[space]; ok {
		if !isSHA256Hex(hex) {
			return "", fmt.Errorf("bad cache key %q", key)
		}
		return filepath.Join(s.root, "sha256", prefix+hex), nil
	}
	h, err := v1.NewHash(key)
	if err != nil {
		return "", fmt.Errorf("bad digest %q: %w", key, err)
	}
	return filepath.Join(s.root, h.Algorithm, h.Hex), nil
}

// keyOfDir inverts entryDir for a directory <root>/<algo>/<name>; ok is
// false for names no key maps to (temporary and foreign directories).
func keyOfDir(dir string) (key, digest string, ok bool) {
	algo, name := filepath.Base(filepath.Dir(dir)), filepath.Base(dir)
	if algo == "sha256" {
		for space, prefix := range localSpaceDirs {
			if hex, found := strings.CutPrefix(name, prefix); found && isSHA256Hex(hex) {
				return space + ":" + hex, "sha256:" + hex, true
			}
		}
	}
	h, err := v1.NewHash(algo + ":" + name)
	if err != nil {
		return "", "", false
	}
	return h.String(), h.String(), true
}

// entry loads a complete cache entry.
func (s *Store) entry(key string) (*Image, bool) {
	dir, err := s.entryDir(key)
	if err != nil {
		return nil, false
	}
	return loadEntry(dir)
}

// loadEntry loads the complete entry in dir. Its key and digest come from
// the directory's name, which is what lookups go by, not from the
// config.json inside.
func loadEntry(dir string) (*Image, bool) {
	key, digest, ok := keyOfDir(dir)
	if !ok {
		return nil, false
	}
	if _, err := os.Stat(filepath.Join(dir, markerFile)); err != nil {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return nil, false
	}
	var m entryMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, false
	}
	disk := filepath.Join(dir, diskFile)
	st, err := os.Stat(disk)
	if err != nil {
		return nil, false
	}
	return &Image{Ref: m.Ref, Digest: digest, Disk: disk, Size: st.Size(), Config: m.Config, Created: m.Created, key: key}, true
}

// entries maps cache key → complete entry for everything in the store.
func (s *Store) entries() (map[string]Image, error) {
	out := map[string]Image{}
	algos, err := os.ReadDir(s.root)
	if err != nil {
		return nil, err
	}
	for _, a := range algos {
		if !a.IsDir() || a.Name() == "tmp" {
			continue
		}
		des, err := os.ReadDir(filepath.Join(s.root, a.Name()))
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			if !de.IsDir() || strings.Contains(de.Name(), ".") {
				continue
			}
			if img, ok := loadEntry(filepath.Join(s.root, a.Name(), de.Name())); ok {
				out[img.key] = *img
			}
		}
	}
	return out, nil
}

// removeEntry deletes the entry with cache key key under its lock. It first renames the entry
// to a *.tmp-rm-* name so that it stops looking complete atomically, even if
// the deletion is interrupted.
func (s *Store) removeEntry(key string) error {
	dir, err := s.entryDir(key)
	if err != nil {
		return err
	}
	l, err := lockFile(context.Background(), dir+".lock")
	if err != nil {
		return err
	}
	defer l.unlock()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	trash := dir + ".tmp-rm-" + randomSuffix()
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("remove image: %w", err)
	}
	syncDir(filepath.Dir(dir))
	return os.RemoveAll(trash)
}

// gc removes *.tmp-* directories whose entry lock nobody holds (left by
// killed processes) and scratch files older than a day. Best effort.
func (s *Store) gc() {
	algos, _ := os.ReadDir(s.root)
	for _, a := range algos {
		if !a.IsDir() || a.Name() == "tmp" {
			continue
		}
		dir := filepath.Join(s.root, a.Name())
		des, _ := os.ReadDir(dir)
		for _, de := range des {
			base, _, ok := strings.Cut(de.Name(), ".tmp-")
			if !ok || !de.IsDir() {
				continue
			}
			l, ok := tryLockFile(filepath.Join(dir, base+".lock"))
			if !ok {
				continue
			}
			os.RemoveAll(filepath.Join(dir, de.Name()))
			l.unlock()
		}
	}
	tmp := filepath.Join(s.root, "tmp")
	des, _ := os.ReadDir(tmp)
	for _, de := range des {
		if fi, err := de.Info(); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(tmp, de.Name()))
		}
	}
}
