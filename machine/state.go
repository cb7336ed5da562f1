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

// Lock is an flock on one of a machine's lock files.
type Lock struct{ f *os.File }

// ErrLocked says another process holds the lock.
var ErrLocked = errors.New("locked")

// TryLock takes the lock file without waiting.
func (s *Store) TryLock(name, file string) (*Lock, error) {
	f, err := os.OpenFile(s.Path(name, file), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
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

// Alive tells whether a VMM process holds the machine.
func (s *Store) Alive(name string) bool {
	l, err := s.TryLock(name, vmmLock)
	if err != nil {
		return errors.Is(err, ErrLocked)
	}
	l.Unlock()
	return false
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
