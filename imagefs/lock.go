package imagefs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// flock(2) locks belong to the open file description, so they exclude other
// processes and other Store instances in the same process alike, and the
// kernel drops them when a process dies: a killed pull never wedges the
// cache.
type fileLock struct{ f *os.File }

// The store is private to the user who owns it: its entries are the root
// filesystems of what that user runs, refs.json says which images those
// are, and a lock file someone else could open is a lock they could hold
// forever. Directories are 0700, files 0600 (less the umask).
const (
	privateDir  os.FileMode = 0o700
	privateFile os.FileMode = 0o600
)

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait.
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, privateFile)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f}, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tryLockFile takes the lock only if nobody holds it.
func tryLockFile(path string) (*fileLock, bool) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, privateFile)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return &fileLock{f}, true
}

func (l *fileLock) unlock() { l.f.Close() }

// writeFileAtomic writes data to path via a synced temporary file and a
// rename, then syncs the directory, so readers see the old or the new
// version and never a torn one. The file is private to the user, like
// everything in the store (refs.json names what the user runs).
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp-" + randomSuffix()
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, privateFile)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
