package imagefs

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/smolvm/smol/imagefs/ext4fs"
)

// build makes the cache entry for src under the entry's lock. Everything
// happens in <hex>.tmp-<random> next to the entry, on the same filesystem,
// which is renamed into place only once complete; on any error it is
// removed, so the cache never holds a partial entry.
func (s *Store) build(ctx context.Context, src *source, o Options) (img *Image, err error) {
	digest := src.digest.String()
	dir, err := s.entryDir(digest)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	l, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return nil, err
	}
	defer l.unlock()
	if img, ok := loadEntry(dir); ok {
		return img, nil // built by someone else while we waited
	}
	// Holding the lock, anything else for this digest is debris.
	if old, _ := filepath.Glob(dir + ".tmp-*"); len(old) > 0 {
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	os.RemoveAll(dir) // an incomplete entry (only possible if tampered with)

	tmp := dir + ".tmp-" + randomSuffix()
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	note := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "note: "+format+"\n", args...)
		}
	}
	limits, err := o.Limits.orDefaults()
	if err != nil {
		return nil, err
	}

	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	image, err := src.open(bctx)
	if err != nil {
		return nil, err
	}
	cf, err := image.ConfigFile()
	if err != nil {
		return nil, s.wrapFetch(bctx, src, "reading image config", err)
	}
	disk := filepath.Join(tmp, diskFile)
	f, err := os.OpenFile(disk, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The filesystem's own times are the image's, not the clock's: the
	// same image gives the same bytes on every host (a pack of it is
	// reproducible).
	w, err := ext4fs.New(f, ext4fs.Options{MaxBytes: limits.MaxBytes, Label: fsLabel, UUID: volumeUUID(digest), Spare: spareBytes, Now: imageTime(cf.Created.Time)})
	if err != nil {
		return nil, err
	}
	u := newUnpacker(w, limits, note)
	if err := s.unpackLayers(bctx, cancel, src, image, u, o.Progress); err != nil {
		return nil, noSpace(err, tmp)
	}
	if testHookBeforeFinish != nil {
		testHookBeforeFinish()
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "writing ext4 image (%s of files)\n", humanBytes(float64(w.DataBytes())))
	}
	if _, err := w.Finish(); err != nil {
		return nil, noSpace(err, tmp)
	}
	if err := f.Sync(); err != nil {
		return nil, noSpace(err, tmp)
	}
	if err := f.Close(); err != nil {
		return nil, noSpace(err, tmp)
	}

	meta := entryMeta{Ref: "", Digest: digest, Platform: src.platform, Created: time.Now().UTC()}
	if cf != nil {
		c := cf.Config
		meta.Config = Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Created: imageTime(cf.Created.Time)}
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(tmp, configFile), b); err != nil {
		return nil, err
	}
	// The marker goes last: only a directory holding it counts.
	if err := writeFileAtomic(filepath.Join(tmp, markerFile), []byte(digest+"\n")); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	syncDir(filepath.Dir(dir))
	img, ok := loadEntry(dir)
	if !ok {
		return nil, fmt.Errorf("image store: entry %s vanished after build", dir)
	}
	return img, nil
}

// unpackLayers applies all layers, in order.
func (s *Store) unpackLayers(ctx context.Context, cancel context.CancelCauseFunc, src *source, image v1.Image, u *unpacker, progress io.Writer) error {
	layers, err := image.Layers()
	if err != nil {
		return s.wrapFetch(ctx, src, "listing layers", err)
	}
	for i, layer := range layers {
		if err := s.applyLayer(ctx, cancel, src, u, layer, i, len(layers), progress); err != nil {
			return err
		}
	}
	return nil
}

// applyLayer streams one layer into the unpacker while hashing it.
// Registry and layout layers are verified against their compressed
// digest, docker-save layers (stored uncompressed) against their diff ID;
// either way a mismatch or a short read fails the build.
func (s *Store) applyLayer(ctx context.Context, cancel context.CancelCauseFunc, src *source, u *unpacker, layer v1.Layer, i, n int, progress io.Writer) error {
	uncompressed := src.kind == kindDockerArchive
	var want v1.Hash
	var err error
	if uncompressed {
		want, err = layer.DiffID()
	} else {
		want, err = layer.Digest()
	}
	if err != nil {
		return s.wrapFetch(ctx, src, fmt.Sprintf("layer %d/%d", i+1, n), err)
	}
	if want.Algorithm != "sha256" {
		return fmt.Errorf("layer %d/%d: unsupported digest algorithm %q", i+1, n, want.Algorithm)
	}
	what := fmt.Sprintf("layer %d/%d %s", i+1, n, shortDigest(want))
	var rc io.ReadCloser
	var total int64
	if uncompressed {
		rc, err = layer.Uncompressed()
	} else {
		total, _ = layer.Size()
		if src.kind == kindRemote {
			s.downloads.Add(1)
		}
		rc, err = layer.Compressed()
	}
	if err != nil {
		return s.wrapFetch(ctx, src, what, err)
	}
	defer rc.Close()

	var onBytes func()
	if src.kind == kindRemote {
		t := time.AfterFunc(stallTimeout, func() {
			cancel(fmt.Errorf("%s: no data from the registry for %s", what, stallTimeout))
		})
		defer t.Stop()
		onBytes = func() { t.Reset(stallTimeout) }
	}
	h := sha256.New()
	pr := newProgressReader(io.TeeReader(rc, h), progress, what, total, onBytes)

	var r io.Reader = pr
	if !uncompressed {
		dr, closeDec, err := decompress(pr)
		if err != nil {
			return s.wrapFetch(ctx, src, what, err)
		}
		defer closeDec()
		r = dr
	}
	if err := u.applyLayer(r); err != nil {
		return s.wrapFetch(ctx, src, what, err)
	}
	// Read what the tar reader left (padding, trailing data) so that the
	// digest covers the whole blob.
	if _, err := io.Copy(io.Discard, pr); err != nil {
		return s.wrapFetch(ctx, src, what, err)
	}
	pr.done()
	if got := hex.EncodeToString(h.Sum(nil)); got != want.Hex {
		return fmt.Errorf("%s: digest mismatch: content is sha256:%s (corrupt or truncated layer)", what, got)
	}
	return nil
}

// wrapFetch prefers the cancellation cause (stall, interrupt) and the
// registry's words over the layer reader's.
func (s *Store) wrapFetch(ctx context.Context, src *source, what string, err error) error {
	if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
		if errors.Is(c, context.Canceled) {
			return fmt.Errorf("%s: %w", what, c)
		}
		return c
	}
	return fmt.Errorf("%s: %w", what, err)
}

// decompress picks the decoder by magic number rather than trusting the
// media type, which some registries and tools get wrong.
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return nil, nil, err
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { zr.Close() }, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

func shortDigest(h v1.Hash) string {
	if len(h.Hex) > 12 {
		return h.Hex[:12]
	}
	return h.Hex
}

// The cache entry's files.
const (
	diskFile   = "rootfs.ext4"
	configFile = "config.json"
	markerFile = "complete"
	fsLabel    = "smolroot"
	// spareBytes is free space left in every image beyond a third of its
	// content, so that a writable copy of it has room to grow.
	spareBytes = 64 << 20
)

// testHookBeforeFinish lets a test look at the host while every layer
// has been applied and the image is not yet finished.
var testHookBeforeFinish func()

// volumeUUID derives the filesystem UUID from the image digest, so that
// the same image always makes the same filesystem.
func volumeUUID(digest string) [16]byte {
	sum := sha256.Sum256([]byte(digest))
	var u [16]byte
	copy(u[:], sum[:])
	u[6] = u[6]&0x0f | 0x50 // version 5-like: name-based
	u[8] = u[8]&0x3f | 0x80
	return u
}

// noSpace turns a full disk into one plain line.
func noSpace(err error, dir string) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("no space left on device under %s", filepath.Dir(dir))
	}
	return err
}

// imageTime is an image's creation time, the Unix epoch when it has none
// (or a hostile one outside what ext4 stores).
func imageTime(t time.Time) time.Time {
	if t.Before(time.Unix(0, 0)) || t.After(time.Unix(1<<32-1, 0)) {
		return time.Unix(0, 0).UTC()
	}
	return t.UTC()
}
