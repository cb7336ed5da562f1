package machine

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/smolvm/smol/imagefs"
	"github.com/smolvm/smol/netdev/policy"
)

// SpecVersion is the format of config.json; a record of another version
// is reported, never rewritten.
const SpecVersion = 1

// Spec is what `smol machine create` records: everything needed to boot
// the machine again, the same way, every time.
type Spec struct {
	Version int       `json:"version"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`

	CPUs    int    `json:"cpus"`
	Memory  uint64 `json:"memory"`  // bytes of guest RAM, taken lazily
	Storage int64  `json:"storage"` // bytes of the persistent writable layer
	// IRQChip is where its interrupt controllers live ("split" or
	// "kernel", vmm.IRQChip) at a cold start; empty: the default of the
	// smol that starts it. A restore builds the one its snapshot has.
	IRQChip string `json:"irqchip,omitempty"`

	Image *Image `json:"image,omitempty"` // nil: smol's busybox root
	// InMemory: the machine boots into its initramfs's busybox root, in
	// guest memory, with no root disk and no writable layer (Image nil,
	// Storage 0): nothing of its own files outlives a stop.
	InMemory bool `json:"inMemory,omitempty"`

	Disks []Disk `json:"disks,omitempty"` // extra disks after the root and storage
	// Volumes are host directories mounted in the guest (-v).
	Volumes []Volume `json:"volumes,omitempty"`

	// Defaults of every exec, over the image's own.
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`

	// Hostname is the guest's host name; empty means the machine's name.
	// A fork's children take their own names.
	Hostname string `json:"hostname,omitempty"`

	Net *Net `json:"net,omitempty"` // nil: no network
	GPU *GPU `json:"gpu,omitempty"` // nil: no display

	// Generation counts the forks and restores between this machine and
	// the one first created (agent.Identity); Parent names the machine it
	// was forked from, if any.
	Generation uint64 `json:"generation,omitempty"`
	Parent     string `json:"parent,omitempty"`

	// A machine made from a pack (smol machine create --from) boots the
	// guest kernel and agent that came in it, so that it runs the same
	// as where it was packed; Pack is that pack's ID (pack.Reader.ID).
	// Empty: this smol's own kernel and agent.
	Kernel string `json:"kernel,omitempty"`
	Agent  string `json:"agent,omitempty"`
	Pack   string `json:"pack,omitempty"`
}

// GuestHostname is the host name the guest gets: Hostname, else Name.
func (s *Spec) GuestHostname() string {
	if s.Hostname != "" {
		return s.Hostname
	}
	return s.Name
}

// GPU is a machine's display (smol machine create --gpu).
type GPU struct {
	Width  uint32 `json:"width"`
	Height uint32 `json:"height"`
	Virgl  bool   `json:"virgl,omitempty"` // 3D through the smol-gpu helper
}

// check validates a fork request's names.
func (r *ForkRequest) check() error {
	if len(r.Names) == 0 || len(r.Names) > MaxForkChildren {
		return fmt.Errorf("a fork makes 1 to %d children, not %d", MaxForkChildren, len(r.Names))
	}
	seen := map[string]bool{}
	for _, n := range r.Names {
		if err := ValidateName(n); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("child name %s given twice", n)
		}
		seen[n] = true
	}
	return nil
}

// DecodeSpec checks a record that came from elsewhere (a snapshot) as
// Load checks config.json.
func DecodeSpec(b []byte) (*Spec, error) { return decodeSpec(b) }

// Net is a machine's network behind smol's userspace gateway, with its
// egress policy (--allow-host, --allow-cidr), upstream resolvers and
// published ports.
type Net struct {
	AllowHosts []string `json:"allowHosts,omitempty"`
	AllowCIDRs []string `json:"allowCIDRs,omitempty"`
	DNS        []string `json:"dns,omitempty"`
	Publish    []string `json:"publish,omitempty"`  // -p values
	NoEgress   bool     `json:"noEgress,omitempty"` // only published ports, no way out
}

// Image is the image a machine's root was made from, pinned by digest:
// the persistent layer only makes sense over the very same image.
type Image struct {
	Ref    string         `json:"ref"`
	Digest string         `json:"digest"`
	Disk   string         `json:"disk"`   // the cached ext4 image
	Config imagefs.Config `json:"config"` // what an exec takes from the image`
}

// Volume is a host directory the guest mounts at Guest: served by the
// VMM over virtio-9p, confined to Host (the guest's "..", symlinks and
// hard links never reach outside it; it can neither open nor make device
// nodes there), with ReadOnly enforced on the host. Files the guest
// creates belong to the user smol runs as.
type Volume struct {
	Host     string `json:"host"`
	Guest    string `json:"guest"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Setuid honours the setuid and setgid bits of Host's files inside
	// the guest (a container's root, whose image may hold su or ping);
	// otherwise the guest mounts the volume nosuid. Either way the guest
	// cannot make a file setuid on the host: the 9P server drops those
	// bits from every mode it is asked to set.
	Setuid bool `json:"setuid,omitempty"`
}

// Disk is an extra raw disk.
type Disk struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Limits of what a record may ask for; a record outside them is corrupt.
const (
	maxCPUs    = 255
	maxMemory  = 1 << 40
	maxStorage = 1 << 44
	maxSpec    = 1 << 20 // bytes of config.json
)

// check validates a spec, whether just built or read back from disk.
func (s *Spec) check() error {
	if s.Version != SpecVersion {
		return fmt.Errorf("config format version %d (this smol reads %d)", s.Version, SpecVersion)
	}
	if err := ValidateName(s.Name); err != nil {
		return err
	}
	switch {
	case s.CPUs < 1 || s.CPUs > maxCPUs:
		return fmt.Errorf("cpus %d out of range 1-%d", s.CPUs, maxCPUs)
	case s.Memory < 64<<20 || s.Memory > maxMemory:
		return fmt.Errorf("memory %d out of range", s.Memory)
	case s.InMemory && (s.Storage != 0 || s.Image != nil):
		return errors.New("a machine in memory with an image or a writable layer")
	case !s.InMemory && (s.Storage < 64<<20 || s.Storage > maxStorage):
		return fmt.Errorf("storage %d out of range (64 MiB to 16 TiB)", s.Storage)
	}
	if s.Hostname != "" {
		if err := ValidateHostname(s.Hostname); err != nil {
			return err
		}
	}
	if s.Image != nil && (s.Image.Disk == "" || s.Image.Digest == "") {
		return errors.New("image without its disk or digest")
	}
	if s.Net != nil {
		if _, err := policy.ParseRules(s.Net.AllowHosts, s.Net.AllowCIDRs); err != nil {
			return err
		}
	}
	return nil
}

func decodeSpec(b []byte) (*Spec, error) {
	if len(b) > maxSpec {
		return nil, fmt.Errorf("config.json is %d bytes", len(b))
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return &s, nil
}
