package machine

import "time"

// APIVersion is the control API's path prefix: /v1/...
const APIVersion = "v1"

// Info is GET /v1/status: the machine as its VMM sees it.
type Info struct {
	Name    string    `json:"name"`
	State   State     `json:"state"`
	PID     int       `json:"pid"`
	CPUs    int       `json:"cpus"`
	Memory  uint64    `json:"memory"` // bytes of guest RAM
	Image   string    `json:"image,omitempty"`
	Started time.Time `json:"started"`
	// HostMemory is what the VM costs the host now: the VMM's resident
	// memory, the guest RAM it has touched included.
	HostMemory uint64 `json:"hostMemory"`
}

// StopRequest is POST /v1/stop.
type StopRequest struct {
	// Timeout is how long the guest gets to shut down cleanly before the
	// VM is stopped hard; zero means DefaultStopTimeout.
	Timeout Duration `json:"timeout"`
}

// DefaultStopTimeout is what a stop waits for a clean shutdown.
const DefaultStopTimeout = 10 * time.Second

// SnapshotRequest is POST /v1/snapshot: the VMM pauses the machine,
// writes its state, RAM and disks to Path (absolute, new), and lets it
// run again. WithoutDisks leaves the disks out, for a caller that copies
// them itself while the machine is paused (smol pack --live).
type SnapshotRequest struct {
	Path         string `json:"path"`
	WithoutDisks bool   `json:"withoutDisks,omitempty"`
}

// ForkRequest is POST /v1/fork: the VMM pauses the machine and starts a
// child machine of each name, each in its own VMM process, continuing
// from this instant with copy-on-write RAM and disks. With Template the
// parent stays paused afterwards, the frozen base of its children;
// otherwise it runs on beside them.
type ForkRequest struct {
	Names    []string `json:"names"`
	Template bool     `json:"template,omitempty"`
}

// MaxForkChildren bounds the children of one fork request.
const MaxForkChildren = 128

// ForkResponse is the answer to a fork: the children, all running.
type ForkResponse struct {
	Children []string `json:"children"`
}

// APIError is the body of every error response.
type APIError struct {
	Error string `json:"error"`
}

// Duration is a time.Duration that travels as a string ("10s").
type Duration time.Duration

func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// execUpgrade is the protocol an exec upgrades its connection to: from
// then on it carries the agent protocol (package agent) end to end.
const execUpgrade = "smol-agent/1"
