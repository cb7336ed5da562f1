package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Start asks the agent to run a command.
type Start struct {
	Args []string `json:"args"` // the command; Args[0] is looked up in the command's PATH
	// Path, if set, is the program Args[0] names, already found by the
	// host in the command's root and PATH (an absolute path there): the
	// agent only checks that it is still an executable file. The shim
	// finds a container's program on the host while the VM boots.
	Path string   `json:"path,omitempty"`
	Env  []string `json:"env,omitempty"` // KEY=VALUE, the whole environment (the agent adds defaults for PATH, HOME, TERM)
	Dir  string   `json:"dir,omitempty"` // working directory; default "/"
	User string   `json:"user,omitempty"`
	// Root, if set, is the directory the command runs chrooted in (a
	// container's root the host shares): its user, working directory and
	// program are found there, and /proc, /sys and /dev are mounted in it.
	Root string `json:"root,omitempty"`
	// ReadOnlyRoot makes Root read-only for the command (an OCI
	// container's root.readonly); the kernel filesystems in it stay as
	// they are.
	ReadOnlyRoot bool `json:"readonly_root,omitempty"`
	// WritablePaths, with ReadOnlyRoot, are absolute paths in Root (as
	// the command sees them: its volumes, which the host mounted there)
	// that stay writable. The first command in a root decides both.
	WritablePaths []string `json:"writable_paths,omitempty"`
	// DevMounts are absolute paths below /dev in Root where the host
	// mounted something: the root's own /dev, which covers them, has
	// them too. The first command in a root decides them.
	DevMounts []string `json:"dev_mounts,omitempty"`
	// MaskedPaths and ReadOnlyPaths, with Root, are absolute paths in it
	// (an OCI container's linux.maskedPaths and readonlyPaths): a masked
	// file reads as empty, a masked directory as an empty read-only one,
	// a read-only path cannot be written; a path the root lacks is
	// skipped. The first command in a root decides them; a command that
	// mounts its PID namespace's /proc applies those below /proc there.
	MaskedPaths   []string `json:"masked_paths,omitempty"`
	ReadOnlyPaths []string `json:"readonly_paths,omitempty"`
	// PIDNamespace, if set, names the PID namespace the command runs in
	// (the host's name for it, a container's or a pod's); "" is the
	// guest's own. With NewPIDNamespace the command starts it as its
	// PID 1 and the namespace ends with it, every process left in it
	// killed; otherwise the command joins it, waiting a moment for the
	// command that starts it if that is still on its way. A namespace
	// needs a Root, whose /proc then shows the namespace's processes.
	PIDNamespace    string `json:"pid_namespace,omitempty"`
	NewPIDNamespace bool   `json:"new_pid_namespace,omitempty"`
	// Cgroup, if set, names the guest cgroup the command runs in (made if
	// missing): a container's, whose use Stats reports.
	Cgroup string `json:"cgroup,omitempty"`
	// Limits, with Cgroup, are set on the cgroup before the command
	// starts in it (an OCI container's resources): all of them, an unset
	// one as no limit. nil leaves the cgroup's limits as they are.
	Limits *CgroupLimits `json:"limits,omitempty"`
	// Groups, if set, are the command's supplementary groups exactly (an
	// OCI process's additionalGids), instead of the user's groups in the
	// root's /etc/group.
	Groups []uint32 `json:"groups,omitempty"`
	// Capabilities, if set, are the command's capability sets exactly
	// (an OCI process's); nil gives it its user's (all of them for root).
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// NoNewPrivileges starts the command with the no_new_privs bit set
	// (an OCI process's noNewPrivileges, kubelet's
	// allowPrivilegeEscalation: false): execve never grants it more
	// privileges, through setuid bits or file capabilities, and no
	// process it starts can clear the bit.
	NoNewPrivileges bool `json:"noNewPrivileges,omitempty"`
	// TTY runs the command on a pseudo-terminal of Rows x Cols; its output
	// then comes as Stdout frames only.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Stdin says the host will send stdin; without it the command's stdin
	// is at EOF from the start.
	Stdin bool `json:"stdin,omitempty"`
	// Hostname, if set, becomes the guest's host name.
	Hostname string `json:"hostname,omitempty"`
	// PowerOff makes the agent power the VM off once the command ended and
	// its Exit frame was sent (the command the VM was started for).
	PowerOff bool `json:"poweroff,omitempty"`
	// Idle runs no command: the agent answers at once with status 0. A
	// persistent machine's boot uses it to learn that the guest is up,
	// and Idle with PowerOff is a clean shutdown (filesystems synced).
	Idle bool `json:"idle,omitempty"`
	// Copy, instead of a command, moves a file tree (smol machine cp).
	Copy *Copy `json:"copy,omitempty"`
	// Stats, instead of a command, asks for the use of the cgroup it
	// names (see Cgroup): one Stdout frame of JSON CgroupStats, then
	// the Exit.
	Stats string `json:"stats,omitempty"`
	// Update, instead of a command, sets Limits on the cgroup it names
	// (made if missing): a running container's new resources.
	Update string `json:"update,omitempty"`
	// Identity, applied before anything else, makes a restored or forked
	// guest a machine of its own (see Identity).
	Identity *Identity `json:"identity,omitempty"`
}

// Identity is what makes a guest that continues from a snapshot or a fork
// distinct from its siblings and its past: without it every child of a
// fork would draw the same random numbers, believe it is the moment of
// the fork, and carry its parent's names.
type Identity struct {
	// Generation counts how many times this guest's state was forked or
	// restored; the agent writes it to GenerationFile, so that programs
	// can notice they were cloned (and drop secrets, reconnect, ...).
	Generation uint64 `json:"generation"`
	// ID is this incarnation's unique identifier (32 hex digits), written
	// beside the generation.
	ID string `json:"id,omitempty"`
	// Seed is fresh host entropy, mixed into the guest kernel's pool and
	// credited, after which its random number generator reseeds.
	Seed []byte `json:"seed,omitempty"`
	// Time is the host's wall clock (Unix nanoseconds) the guest's clock
	// is set to; zero leaves it alone. It is as old as the identity's way
	// into the guest, which on a busy host takes seconds: SyncClock then
	// corrects it.
	Time int64 `json:"time,omitempty"`
	// SyncClock makes the agent, once Time is set, ask the host for its
	// clock ClockSamples times over the same connection (FrameTimeQuery,
	// answered with FrameTime) and set the guest's clock from the answer
	// that came back soonest, plus half its round trip: the error is then
	// at most half the shortest round trip, not the whole delivery delay.
	SyncClock bool `json:"syncClock,omitempty"`
	// MachineID replaces /etc/machine-id (32 hex digits); "" leaves it.
	MachineID string `json:"machineId,omitempty"`
}

// GenerationFile and IDFile are where the agent publishes an Identity's
// Generation and ID in the guest.
const (
	GenerationFile = "/run/smol/generation"
	IDFile         = "/run/smol/id"
)

// ClockSamples is how many times an agent asks for the host's clock when
// an Identity says SyncClock; the host answers no more.
const ClockSamples = 4

// EncodeTime is a FrameTime payload.
func EncodeTime(unixNano int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(unixNano)) }

// DecodeTime reads a FrameTime payload.
func DecodeTime(p []byte) (int64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("agent: a time frame of %d bytes", len(p))
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

// AskClock is the guest's side of SyncClock: it asks for the host's clock
// ClockSamples times and returns, of the answers, the one that came back
// soonest plus half its round trip (estimate, Unix nanoseconds) and the
// moment, on this side's monotonic clock, that estimate is for.
func AskClock(r *Reader, w *Writer) (estimate int64, at time.Time, err error) {
	best := time.Duration(-1)
	for range ClockSamples {
		asked := time.Now()
		if err := w.Write(FrameTimeQuery, nil); err != nil {
			return 0, time.Time{}, err
		}
		f, err := r.Read()
		if err != nil {
			return 0, time.Time{}, err
		}
		if f.Type != FrameTime {
			return 0, time.Time{}, fmt.Errorf("agent: the host sent a %s frame, not its time", f.Type)
		}
		host, err := DecodeTime(f.Payload)
		if err != nil {
			return 0, time.Time{}, err
		}
		arrived := time.Now()
		if rtt := arrived.Sub(asked); best < 0 || rtt < best {
			best, estimate, at = rtt, host+int64(rtt/2), arrived
		}
	}
	return estimate, at, nil
}

// MaxSeed bounds an Identity's seed.
const MaxSeed = 512

func (id *Identity) validate() error {
	if len(id.Seed) > MaxSeed {
		return fmt.Errorf("an identity seed of %d bytes (at most %d)", len(id.Seed), MaxSeed)
	}
	for _, h := range []string{id.ID, id.MachineID} {
		if h != "" && !isHex32(h) {
			return fmt.Errorf("identity %q is not 32 hex digits", h)
		}
	}
	return nil
}

func isHex32(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Copy moves a file tree as a tar stream (package tarcopy). Out sends the
// tree at Path in the Stdout frames; otherwise the tree arriving in the
// Stdin frames is unpacked at Path (into it when it is a directory, else
// as it), with its modes, times and owners.
type Copy struct {
	Out  bool   `json:"out,omitempty"`
	Path string `json:"path"`
}

// MaxArgs bounds the arguments and environment entries of a Start.
const MaxArgs = 1 << 14

// MaxGroups bounds a Start's supplementary groups: Linux's NGROUPS_MAX.
const MaxGroups = 1 << 16

// MaxNameBytes bounds a PID namespace's name (a container ID is 64).
const MaxNameBytes = 256

// Validate checks a Start that came from the other side.
func (s *Start) Validate() error {
	if s.Identity != nil {
		if err := s.Identity.validate(); err != nil {
			return err
		}
	}
	if s.Stats != "" || s.Update != "" {
		switch {
		case len(s.Args) != 0 || s.Idle || s.Copy != nil || s.Cgroup != "":
			return errors.New("a stats or update request has no command")
		case s.Stats != "" && s.Update != "":
			return errors.New("a request is for stats or an update, not both")
		case s.Update != "" && s.Limits == nil:
			return errors.New("an update without limits")
		case s.Stats != "" && s.Limits != nil:
			return errors.New("a stats request sets no limits")
		}
		if s.Limits != nil {
			if err := s.Limits.Validate(); err != nil {
				return err
			}
		}
		return ValidCgroupName(s.Stats + s.Update)
	}
	if s.Cgroup != "" {
		if err := ValidCgroupName(s.Cgroup); err != nil {
			return err
		}
	}
	if s.Limits != nil {
		if s.Cgroup == "" {
			return errors.New("limits need a cgroup")
		}
		if err := s.Limits.Validate(); err != nil {
			return err
		}
	}
	if s.Idle || s.Copy != nil {
		if len(s.Args) != 0 {
			return errors.New("an idle or copy start has no command")
		}
		if s.Copy != nil && (s.Copy.Path == "" || s.Copy.Path[0] != '/') {
			return errors.New("a copy needs an absolute path")
		}
		return nil
	}
	switch {
	case len(s.Args) == 0:
		return errors.New("no command given")
	case len(s.Args) > MaxArgs || len(s.Env) > MaxArgs:
		return errors.New("too many arguments or environment entries")
	case s.Args[0] == "":
		return errors.New("empty command name")
	case s.Root != "" && s.Root[0] != '/':
		return errors.New("the command's root must be an absolute path")
	case s.Path != "" && s.Path[0] != '/':
		return errors.New("the command's program path must be absolute")
	case s.ReadOnlyRoot && s.Root == "":
		return errors.New("a read-only root needs a root")
	case len(s.WritablePaths) > 0 && !s.ReadOnlyRoot:
		return errors.New("writable paths are for a read-only root")
	case len(s.WritablePaths) > MaxArgs || len(s.DevMounts) > MaxArgs:
		return errors.New("too many writable paths or /dev mounts")
	case len(s.DevMounts) > 0 && s.Root == "":
		return errors.New("/dev mounts need a root")
	case (len(s.MaskedPaths) > 0 || len(s.ReadOnlyPaths) > 0) && s.Root == "":
		return errors.New("masked and read-only paths need a root")
	case len(s.MaskedPaths) > MaxArgs || len(s.ReadOnlyPaths) > MaxArgs:
		return errors.New("too many masked or read-only paths")
	case s.NewPIDNamespace && s.PIDNamespace == "":
		return errors.New("a new PID namespace needs a name")
	case s.PIDNamespace != "" && s.Root == "":
		return errors.New("a PID namespace needs a root")
	case len(s.PIDNamespace) > MaxNameBytes:
		return fmt.Errorf("a PID namespace's name is longer than %d bytes", MaxNameBytes)
	case len(s.Groups) > MaxGroups:
		return fmt.Errorf("more than %d supplementary groups", MaxGroups)
	}
	if s.Capabilities != nil {
		if err := s.Capabilities.validate(); err != nil {
			return err
		}
	}
	for _, paths := range [][]string{s.WritablePaths, s.MaskedPaths, s.ReadOnlyPaths} {
		for _, p := range paths {
			if p == "" || p[0] != '/' {
				return fmt.Errorf("path %q is not absolute", p)
			}
		}
	}
	for _, d := range s.DevMounts {
		if len(d) <= len("/dev/") || d[:len("/dev/")] != "/dev/" {
			return fmt.Errorf("/dev mount %q is not below /dev", d)
		}
	}
	for _, kv := range s.Env {
		if k, _, ok := cutEnv(kv); !ok || k == "" {
			return fmt.Errorf("environment entry %q is not KEY=VALUE", kv)
		}
	}
	return nil
}

func cutEnv(kv string) (k, v string, ok bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

// ValidCgroupName checks a cgroup's name: one path element of at most
// MaxNameBytes, letters, digits and . _ - only (containerd's IDs).
func ValidCgroupName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > MaxNameBytes {
		return fmt.Errorf("cgroup name %q: want 1 to %d bytes, not . or ..", name, MaxNameBytes)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("cgroup name %q: only letters, digits and . _ - are allowed", name)
		}
	}
	return nil
}

// CgroupLimits are a cgroup's resource limits (cgroup v2): what an OCI
// container's linux.resources ask for, in the kernel's own units. Zero
// is no limit (or, for CPUWeight, the kernel's default of 100).
type CgroupLimits struct {
	// MemoryMax is memory.max in bytes: past it the cgroup's memory is
	// reclaimed, and what cannot be is ended by the OOM killer.
	MemoryMax uint64 `json:"memory_max,omitempty"`
	// PidsMax is pids.max: forks beyond it fail.
	PidsMax uint64 `json:"pids_max,omitempty"`
	// CPUWeight is cpu.weight, 1 to 10000: the cgroup's share of the CPUs
	// against its siblings when they compete.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	// CPUQuotaUsec of every CPUPeriodUsec is cpu.max: the CPU time the
	// cgroup may use per period, over all CPUs. A zero period is the
	// kernel's default, 100 ms.
	CPUQuotaUsec  uint64 `json:"cpu_quota_usec,omitempty"`
	CPUPeriodUsec uint64 `json:"cpu_period_usec,omitempty"`
}

// The kernel's bounds on cpu.max and cpu.weight.
const (
	MinCPUPeriodUsec     = 1000
	MaxCPUPeriodUsec     = 1000000
	DefaultCPUPeriodUsec = 100000
	MinCPUQuotaUsec      = 1000
	MaxCPUWeight         = 10000
)

// Validate checks limits against the kernel's bounds, so that a bad value
// is refused with a reason instead of a bare EINVAL from a cgroup file.
func (l *CgroupLimits) Validate() error {
	switch {
	case l.CPUWeight > MaxCPUWeight:
		return fmt.Errorf("a CPU weight of %d (1 to %d)", l.CPUWeight, MaxCPUWeight)
	case l.CPUPeriodUsec != 0 && (l.CPUPeriodUsec < MinCPUPeriodUsec || l.CPUPeriodUsec > MaxCPUPeriodUsec):
		return fmt.Errorf("a CPU period of %d µs (%d to %d)", l.CPUPeriodUsec, MinCPUPeriodUsec, MaxCPUPeriodUsec)
	case l.CPUQuotaUsec != 0 && l.CPUQuotaUsec < MinCPUQuotaUsec:
		return fmt.Errorf("a CPU quota of %d µs (at least %d)", l.CPUQuotaUsec, MinCPUQuotaUsec)
	case l.CPUQuotaUsec > math.MaxInt64/1000:
		return fmt.Errorf("a CPU quota of %d µs", l.CPUQuotaUsec)
	}
	return nil
}

// CgroupStats is a cgroup's use, as cgroup v2 counts it (cpu.stat,
// memory.current, memory.max, memory.stat, pids.current): what
// containerd's task metrics carry.
type CgroupStats struct {
	CPUUsageUsec  uint64 `json:"cpu_usage_usec"`
	CPUUserUsec   uint64 `json:"cpu_user_usec"`
	CPUSystemUsec uint64 `json:"cpu_system_usec"`
	// MemoryUsage is memory.current; MemoryLimit memory.max (0: none).
	MemoryUsage  uint64 `json:"memory_usage"`
	MemoryLimit  uint64 `json:"memory_limit,omitempty"`
	Anon         uint64 `json:"anon"`
	File         uint64 `json:"file"`
	ActiveFile   uint64 `json:"active_file"`
	InactiveFile uint64 `json:"inactive_file"`
	PageFaults   uint64 `json:"pgfault"`
	MajorFaults  uint64 `json:"pgmajfault"`
	Pids         uint64 `json:"pids"`
}

// Exit is the command's end.
type Exit struct {
	// Code is the exit status as a shell reports it: the exit code, or
	// 128+N when signal N killed the command, or 126/127 when it could
	// not be started (Error then says why).
	Code   int    `json:"code"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	// OOMKilled says the kernel's OOM killer ended a process in the
	// command's cgroup (Start.Cgroup) while the command ran: the cgroup
	// reached its memory limit.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Winsize is a terminal's size in characters.
type Winsize struct{ Rows, Cols uint16 }

// EncodeResize and DecodeResize are the Resize frame's payload.
func EncodeResize(w Winsize) []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[0:], w.Rows)
	binary.BigEndian.PutUint16(b[2:], w.Cols)
	return b[:]
}

// DecodeResize parses a Resize payload.
func DecodeResize(p []byte) (Winsize, error) {
	if len(p) != 4 {
		return Winsize{}, fmt.Errorf("resize frame of %d bytes, want 4", len(p))
	}
	return Winsize{Rows: binary.BigEndian.Uint16(p[0:]), Cols: binary.BigEndian.Uint16(p[2:])}, nil
}

// DecodeStart parses and validates a Start payload.
func DecodeStart(p []byte) (Start, error) {
	var s Start
	if err := json.Unmarshal(p, &s); err != nil {
		return Start{}, fmt.Errorf("bad start frame: %w", err)
	}
	return s, s.Validate()
}

// DecodeExit parses an Exit payload.
func DecodeExit(p []byte) (Exit, error) {
	var e Exit
	if err := json.Unmarshal(p, &e); err != nil {
		return Exit{}, fmt.Errorf("bad exit frame: %w", err)
	}
	if e.Code < 0 || e.Code > 255 {
		return Exit{}, fmt.Errorf("bad exit frame: status %d out of range", e.Code)
	}
	return e, nil
}
