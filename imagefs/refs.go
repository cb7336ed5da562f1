package imagefs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The ref index (refs.json) maps what users type to digests, so that
// PullMissing can answer from the cache without any network access and List
// can show names. Keys are "<canonical ref>|<platform>": the canonical form
// of a registry ref (index.docker.io/library/alpine:latest) or the absolute
// path of a local source, so "alpine" and "docker.io/library/alpine" share an
// entry, while each platform of a multi-arch image has its own. A record's
// Digest is the entry's cache key (see entryDir): a registry ref's is in
// the registry's key space, a local source's in a local one.

type refIndex struct {
	Refs map[string]refRecord `json:"refs"`
}

type refRecord struct {
	Ref      string    `json:"ref"`    // as last typed
	Digest   string    `json:"digest"` // cache key of the entry
	Platform string    `json:"platform"`
	Updated  time.Time `json:"updated"`
	// Size and modification time of a local tarball when it was read, so
	// an unchanged file need not be read (and unpacked) again.
	SourceSize  int64 `json:"sourceSize,omitempty"`
	SourceMtime int64 `json:"sourceMtime,omitempty"`
}

func refKey(canonical, platform string) string { return canonical + "|" + platform }

// refName is the canonical ref part of a key.
func refName(key string) string {
	if i := strings.LastIndex(key, "|"); i >= 0 {
		return key[:i]
	}
	return key
}

// isLocalRefKey reports a key made for a local source: its canonical part
// is an absolute path, which no registry reference is.
func isLocalRefKey(key string) bool { return strings.HasPrefix(refName(key), "/") }

// legacyLocalDigests lists the registry-space cache keys that local refs
// point to: what an older smol, which had one key space for all, left.
func (idx *refIndex) legacyLocalDigests() []string {
	var out []string
	for k, r := range idx.Refs {
		if isLocalRefKey(k) && !isLocalKey(r.Digest) && !slices.Contains(out, r.Digest) {
			out = append(out, r.Digest)
		}
	}
	return out
}

func (idx *refIndex) pointsTo(digest string) bool {
	for _, r := range idx.Refs {
		if r.Digest == digest {
			return true
		}
	}
	return false
}

func (s *Store) refsPath() string { return filepath.Join(s.root, "refs.json") }

// loadRefs reads the index without locking: writers replace the file by
// rename, so a reader always sees a whole version.
func (s *Store) loadRefs() (*refIndex, error) {
	idx := &refIndex{Refs: map[string]refRecord{}}
	b, err := os.ReadFile(s.refsPath())
	if errors.Is(err, os.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, idx); err != nil {
		return nil, fmt.Errorf("image store: corrupt %s: %w", s.refsPath(), err)
	}
	if idx.Refs == nil {
		idx.Refs = map[string]refRecord{}
	}
	return idx, nil
}

// updateRefs applies fn to the index under refs.lock and writes the result
// atomically.
func (s *Store) updateRefs(fn func(*refIndex)) error {
	l, err := lockFile(context.Background(), filepath.Join(s.root, "refs.lock"))
	if err != nil {
		return err
	}
	defer l.unlock()
	idx, err := s.loadRefs()
	if err != nil {
		return err
	}
	fn(idx)
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.refsPath(), b)
}

func (s *Store) setRef(src *source, ref string) error {
	rec := refRecord{Ref: ref, Digest: src.digest.String(), Platform: src.platform,
		SourceSize: src.stampSize, SourceMtime: src.stampMtime}
	idx, err := s.loadRefs()
	if err == nil {
		if r, ok := idx.Refs[src.key]; ok {
			r.Updated = time.Time{}
			if r == rec {
				return nil // nothing changes; skip the write
			}
		}
	}
	rec.Updated = time.Now().UTC()
	return s.updateRefs(func(idx *refIndex) { idx.Refs[src.key] = rec })
}

// localStamp identifies the version of a local tarball cheaply.
func localStamp(path string) (key string, size, mtime int64, ok bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", 0, 0, false
	}
	fi, err := os.Stat(abs)
	if err != nil || !fi.Mode().IsRegular() {
		return "", 0, 0, false
	}
	return abs, fi.Size(), fi.ModTime().UnixNano(), true
}
