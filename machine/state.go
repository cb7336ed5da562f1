package machine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// State is where a machine is in its life.
type State string

const (
	Created  State = "created"  // recorded, never started
	Starting State = "starting" // its VMM is booting it
	Running  State = "running"
	Paused   State = "paused" // its vCPUs are parked
	Stopped  State = "stopped"
	Failed   State = "failed" // its VMM died or could not boot it
)

// stateRecord is state.json, written by the VMM.
type stateRecord struct {
	State   State     `json:"state"`
	PID     int       `json:"pid,omitempty"`
	Started time.Time `json:"started,omitempty"`
	Ended   time.Time `json:"ended,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// SetState records the machine's state (the VMM's side).
func (s *Store) SetState(name string, st State, pid int, started time.Time, errMsg string) error {
	r := stateRecord{State: st, PID: pid, Started: started, Error: errMsg}
	if st == Stopped || st == Failed {
		r.Ended = time.Now()
	}
	b, _ := json.Marshal(r)
	return writeFileAtomic(s.Path(name, stateFile), b)
}

func (s *Store) readState(name string) stateRecord {
	f, err := os.Open(s.Path(name, stateFile))
	if err != nil {
		return stateRecord{State: Created}
	}
	defer f.Close()
	var r stateRecord
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	if json.Unmarshal(b, &r) != nil {
		return stateRecord{State: Failed, Error: "state.json is damaged"}
	}
	return r
}

// Lock is a write lock on one of a machine's lock files: an open file
// description lock (F_OFD_SETLK), which the kernel drops when the holder
// dies and which Alive can test without taking (F_OFD_GETLK). A probe
// that took the lock, even for an instant, could make a starting VMM see
// its machine as taken.
type Lock struct{ f *os.File }

// ErrLocked says another process holds the lock.
var ErrLocked = errors.New("locked")

// TryLock takes the lock file without waiting.
func (s *Store) TryLock(name, file string) (*Lock, error) {
	f, err := os.OpenFile(s.Path(name, file), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0} // the whole file
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, ErrLocked
		}
		return nil, err
	}
	return &Lock{f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() { l.f.Close() }

// File is the lock's open file (the VMM passes it on to keep it held).
func (l *Lock) File() *os.File { return l.f }

// StartLock and VMMLock name the two lock files.
const (
	StartLock = startLock
	VMMLock   = vmmLock
)

// Alive tells whether a VMM process holds the machine, without taking
// its lock.
func (s *Store) Alive(name string) bool {
	f, err := os.Open(s.Path(name, vmmLock))
	if err != nil {
		return false // never started
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false
	}
	return lk.Type != unix.F_UNLCK
}

// Status is a machine's state as the files tell it, without asking the
// VMM: the VMM's word, corrected by whether the VMM is alive.
type Status struct {
	Name    string
	State   State
	PID     int
	Started time.Time
	Ended   time.Time
	Error   string // why it failed
}

// Status reads a machine's state.
func (s *Store) Status(name string) (Status, error) {
	if _, err := s.Load(name); err != nil {
		return Status{}, err
	}
	r := s.readState(name)
	st := Status{Name: name, State: r.State, PID: r.PID, Started: r.Started, Ended: r.Ended, Error: r.Error}
	if s.Alive(name) {
		return st, nil
	}
	switch r.State {
	case Starting, Running, Paused:
		st.State = Failed
		st.Error = fmt.Sprintf("its VMM process (pid %d) died", r.PID)
	}
	st.PID = 0
	return st, nil
}
