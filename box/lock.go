package box

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// One box at a time per machine. A box is a software CPU that wants both of
// the host's cores; two at once (go test runs packages in parallel) starve
// each other's clocks and make every timing inside them meaningless. Run
// therefore holds an exclusive lock on a file in the temporary directory
// while its box runs, and waits for it.

// lockPath is the machine-wide box lock.
func lockPath() string { return filepath.Join(os.TempDir(), "smolbox.lock") }

// acquireLock waits until no other box runs on this machine, saying so once
// on notice, and returns the function that releases the lock.
func acquireLock(ctx context.Context, notice io.Writer) (release func(), err error) {
	f, err := os.OpenFile(lockPath(), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("box lock: %w", err)
	}
	told := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("box lock %s: %w", lockPath(), err)
		}
		if !told {
			fmt.Fprintf(notice, "box: waiting for another box on this machine to finish (%s)\n", lockPath())
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("interrupted while waiting for the box lock: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
