package imagefs

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/smolvm/smol/internal/atomicfile"
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

// writeFileAtomic, syncDir and randomSuffix: see package atomicfile.
func writeFileAtomic(path string, data []byte) error { return atomicfile.Write(path, data) }
func syncDir(dir string)                             { atomicfile.SyncDir(dir) }
func randomSuffix() string                           { return atomicfile.RandomSuffix() }
