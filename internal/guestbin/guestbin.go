// Package guestbin gives smol the guest kernel and agent initramfs it was
// built with, so that a smol binary copied alone to another machine runs
// guests: `make build` compresses build/vmlinux and build/agent.cpio into
// assets/ (mkassets) and builds with the smol_embed tag, which embeds them
// with their SHA-256 digests. A build without the tag embeds nothing and
// smol looks for the files instead (artifacts.go).
//
// An embedded file is used through a copy on disk (the VMM loads a kernel
// from a path): the first use decompresses it into the user's cache
// directory under a name that carries its digest, checks the digest, and
// renames it into place; later uses only find it there.
package guestbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// An asset is one embedded file: its zstd-compressed bytes and the
// SHA-256 of what they decompress to.
type asset struct {
	name       string
	compressed []byte
	sum        string // hex
}

// ErrNotEmbedded says this smol was built without its guest files.
var ErrNotEmbedded = errors.New("not embedded in this build")

// Kernel is the path of the embedded guest kernel (an ELF vmlinux),
// extracted into the cache on first use.
func Kernel() (string, error) { return kernel.path() }

// Agent is the path of the embedded agent initramfs.
func Agent() (string, error) { return agent.path() }

// AgentSum is the SHA-256 (hex) of the embedded agent initramfs, "" in a
// build without it: the digest of what Agent's file holds, known without
// reading the file.
func AgentSum() string { return agent.sum }

// Embedded tells whether this build carries its guest files.
func Embedded() bool { return kernel.compressed != nil }

func (a asset) path() (string, error) {
	if a.compressed == nil {
		return "", ErrNotEmbedded
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	return extract(a, dir)
}

// cacheDir is $XDG_CACHE_HOME/smol/guest (~/.cache/smol/guest), or one
// under the temporary directory for a user without a home.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("smol-cache-%d", os.Getuid()))
	}
	dir := filepath.Join(base, "smol", "guest")
	return dir, os.MkdirAll(dir, 0o700)
}

// extract returns dir/SUM-NAME, writing it first when it is not there: a
// temporary file, decompressed, its digest checked, then renamed, so
// that a concurrent smol or a crash never leaves a partial file under the
// final name.
func extract(a asset, dir string) (string, error) {
	final := filepath.Join(dir, a.sum[:16]+"-"+a.name)
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() {
		return final, nil
	}
	tmp, err := os.CreateTemp(dir, "."+a.name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("extract the embedded %s: %w", a.name, err)
	}
	defer os.Remove(tmp.Name())
	dec, err := zstd.NewReader(bytes.NewReader(a.compressed), zstd.WithDecoderConcurrency(1))
	if err != nil {
		tmp.Close()
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), dec)
	dec.Close()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("extract the embedded %s: %w", a.name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != a.sum {
		return "", fmt.Errorf("the embedded %s is damaged: sha256 %s, built with %s", a.name, got, a.sum)
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("extract the embedded %s: %w", a.name, err)
	}
	return final, nil
}
