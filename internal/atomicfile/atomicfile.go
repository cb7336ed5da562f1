// Package atomicfile replaces small files so that readers see the old or
// the new version and never a torn one, even across a crash.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// Write replaces path with data through a synced temporary file beside it
// and a rename, then syncs the directory. The file is private to the user
// (0600): everything smol keeps names what the user runs.
func Write(path string, data []byte) error {
	tmp := path + ".tmp-" + RandomSuffix()
	err := Create(tmp, data)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	SyncDir(filepath.Dir(path))
	return nil
}

// Create makes path, which must not exist, holding data, synced (0600).
func Create(path string, data []byte) error {
	return CreateWith(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// CreateWith makes path, which must not exist, private to the user
// (0600), has fill write it, and syncs it; on any failure path is
// removed, so it holds a whole file or nothing.
func CreateWith(path string, fill func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// Publish gives the finished file tmp a second name, path, which must
// not exist, and makes that durable: a link, not a rename, so that a file
// that appeared at path meanwhile stays (the error then wraps
// os.ErrExist). The caller removes tmp.
func Publish(tmp, path string) error {
	if err := os.Link(tmp, path); err != nil {
		return err // *LinkError: names path, wraps ErrExist
	}
	SyncDir(filepath.Dir(path))
	return nil
}

// SyncDir makes a directory's entries (a rename, a new file) durable.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// RandomSuffix names temporary files and directories uniquely.
func RandomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
