package machine

import (
	"os"
	"sync"
)

// MaxLog is the size at which a log file is rotated: the log and its one
// predecessor hold at most twice this.
const MaxLog = 1 << 20

// RotatingLog appends to a file and keeps it bounded: at MaxLog bytes it
// becomes NAME.1 (replacing the older one) and a new file starts.
type RotatingLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	size int64
}

// OpenLog opens path for appending.
func OpenLog(path string) (*RotatingLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fi, _ := f.Stat()
	l := &RotatingLog{path: path, f: f}
	if fi != nil {
		l.size = fi.Size()
	}
	return l, nil
}

// Write appends p; write errors (a full disk) drop the output rather than
// stall the guest's console.
func (l *RotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return len(p), nil
	}
	if l.size+int64(len(p)) > MaxLog {
		l.f.Close()
		os.Rename(l.path, l.path+".1")
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		if err != nil {
			l.f = nil
			return len(p), nil
		}
		l.f, l.size = f, 0
	}
	n, _ := l.f.Write(p)
	l.size += int64(n)
	return len(p), nil
}

// Close closes the file.
func (l *RotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Tail returns up to n bytes from the end of the machine's console log.
func (s *Store) Tail(name string, n int64) []byte {
	return s.TailSince(name, 0, n)
}

// ConsoleSize is how long the machine's console log is now: a start that
// notes it can tell its own guest's output (TailSince) from an earlier
// boot's, the log being appended to across starts.
func (s *Store) ConsoleSize(name string) int64 {
	fi, err := os.Stat(s.Path(name, ConsoleLog))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// TailSince is Tail of what was written at or after offset since (all of
// the log if it was rotated since: it is then shorter than since).
func (s *Store) TailSince(name string, since, n int64) []byte {
	f, err := os.Open(s.Path(name, ConsoleLog))
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	if since > fi.Size() {
		since = 0
	}
	off := max(fi.Size()-n, since, 0)
	b := make([]byte, fi.Size()-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}
