package pack

import (
	"errors"
	"fmt"
	"time"

	"github.com/smolvm/smol/devices/gpu"
)

// The format's version: a file of another major version is refused; a
// newer minor only adds what an older reader may ignore.
const (
	Major = 1
	Minor = 0
)

var magic = [8]byte{'S', 'M', 'O', 'L', 'P', 'A', 'C', 'K'}

// Limits checked before anything is decoded.
const (
	headerLen   = 8 + 2 + 2 + 4 + 4
	MaxManifest = 1 << 20 // bytes of manifest JSON
	MaxSections = 64
	// MaxSectionSize bounds what one section decompresses to (a root
	// filesystem or a writable layer): 1 TiB.
	MaxSectionSize = 1 << 40
)

// Section names.
const (
	Kernel  = "kernel"  // the guest kernel (ELF vmlinux)
	Agent   = "agent"   // the agent initramfs with smol's busybox
	Root    = "root"    // the image's read-only root filesystem (ext4)
	Storage = "storage" // the machine's writable layer (ext4), with --from-machine
	Live    = "live"    // a snapshot (package snapshot) to resume, with --live
)

// ErrFormat wraps every way a file fails to be a .smolmachine this smol
// can read; the message says which.
var ErrFormat = errors.New("not a usable .smolmachine file")

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// Manifest describes a packed machine.
type Manifest struct {
	Format   string    `json:"format"`   // "smolmachine/1.0"
	Smol     string    `json:"smol"`     // the smol that packed it
	Created  time.Time `json:"created"`  // from the input (the image's creation), never the clock
	Platform string    `json:"platform"` // "linux/amd64"
	Machine  Machine   `json:"machine"`
	Sections []Section `json:"sections"`
}

// Machine is the packed machine's shape and the defaults of its commands.
type Machine struct {
	CPUs       int      `json:"cpus"`
	Memory     uint64   `json:"memory"`            // bytes
	Storage    int64    `json:"storage"`           // bytes of the writable layer
	IRQChip    string   `json:"irqchip,omitempty"` // where its interrupt controllers live; "": the default
	Env        []string `json:"env,omitempty"`
	Workdir    string   `json:"workdir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Image      string   `json:"image,omitempty"`  // the reference it was packed from
	Digest     string   `json:"digest,omitempty"` // that image's digest
	Net        *Net     `json:"net,omitempty"`    // nil: no network
	GPU        *GPU     `json:"gpu,omitempty"`    // nil: no display
}

// GPU is a packed machine's display size.
type GPU struct {
	Width  uint32 `json:"width"`
	Height uint32 `json:"height"`
	Virgl  bool   `json:"virgl,omitempty"` // 3D through the smol-gpu helper
}

// Net is a packed machine's network policy (smol's gateway).
type Net struct {
	AllowHosts []string `json:"allowHosts,omitempty"`
	AllowCIDRs []string `json:"allowCIDRs,omitempty"`
	DNS        []string `json:"dns,omitempty"`
}

// Section is one compressed part of the file.
type Section struct {
	Name   string `json:"name"`
	Offset int64  `json:"offset"` // of its compressed bytes, from the start of data
	Length int64  `json:"length"` // compressed bytes
	Size   int64  `json:"size"`   // bytes it decompresses to
	SHA256 string `json:"sha256"` // of those bytes
}

// Section returns the section called name.
func (m *Manifest) Section(name string) (Section, bool) {
	for _, s := range m.Sections {
		if s.Name == name {
			return s, true
		}
	}
	return Section{}, false
}

// check validates a manifest read from a file of size bytes, whose data
// begins at dataStart.
func (m *Manifest) check(dataStart, size int64) error {
	if m.Format != formatName {
		return formatErr("manifest format %q (this smol reads %q)", m.Format, formatName)
	}
	if len(m.Sections) == 0 || len(m.Sections) > MaxSections {
		return formatErr("%d sections (want 1 to %d)", len(m.Sections), MaxSections)
	}
	if m.Machine.CPUs < 1 || m.Machine.CPUs > 254 || m.Machine.Memory < 64<<20 || m.Machine.Memory > 1<<40 {
		return formatErr("a machine of %d vCPUs and %d bytes", m.Machine.CPUs, m.Machine.Memory)
	}
	if s := m.Machine.Storage; s != 0 && (s < 64<<20 || s > 1<<44) {
		return formatErr("a writable layer of %d bytes", s)
	}
	if g := m.Machine.GPU; g != nil {
		if err := gpu.CheckSize(g.Width, g.Height); err != nil {
			return formatErr("%v", err)
		}
	}
	// What smol prints of a pack: plain text, or it could drive the
	// terminal that shows it.
	for _, f := range []struct{ name, value string }{{"smol", m.Smol}, {"platform", m.Platform}, {"image", m.Machine.Image}, {"digest", m.Machine.Digest}} {
		if !printable(f.value) || len(f.value) > 1024 {
			return formatErr("manifest %s %q", f.name, f.value)
		}
	}
	seen := map[string]bool{}
	for _, s := range m.Sections {
		switch {
		case seen[s.Name]:
			return formatErr("section %q twice", s.Name)
		case !knownSection(s.Name):
			return formatErr("unknown section %q", s.Name)
		case s.Offset < 0 || s.Length < 0 || s.Offset > size-dataStart || s.Length > size-dataStart-s.Offset:
			return formatErr("section %s [%d, +%d) lies outside the file (truncated?)", s.Name, s.Offset, s.Length)
		case s.Size < 0 || s.Size > MaxSectionSize:
			return formatErr("section %s of %d bytes", s.Name, s.Size)
		case len(s.SHA256) != 64:
			return formatErr("section %s has no SHA-256", s.Name)
		}
		seen[s.Name] = true
	}
	for _, need := range []string{Kernel, Agent, Root} {
		if !seen[need] {
			return formatErr("no %s section", need)
		}
	}
	return nil
}

const formatName = "smolmachine/1.0"

func knownSection(name string) bool {
	switch name {
	case Kernel, Agent, Root, Storage, Live:
		return true
	}
	return false
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
