package agent

import (
	"fmt"
	"strings"
)

// Capabilities are the Linux capability sets a command starts with (an
// OCI process's capabilities), as capability numbers. Bounding limits
// what the command and its children can ever gain; the other four are
// the thread sets of capabilities(7). A command with no Capabilities gets
// what its user has (everything for root).
type Capabilities struct {
	Bounding    []uint8 `json:"bounding"`
	Effective   []uint8 `json:"effective"`
	Inheritable []uint8 `json:"inheritable"`
	Permitted   []uint8 `json:"permitted"`
	Ambient     []uint8 `json:"ambient"`
}

// MaxCapability is the highest capability number a Start may carry: the
// sets are 64-bit masks in the kernel's interface.
const MaxCapability = 63

// capabilityNames are the kernel's capability numbers (linux/capability.h).
var capabilityNames = []string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL",
	"SETGID", "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE",
	"NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
	"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
	"BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// CapabilityNumber returns the number of a capability named as OCI specs
// name them ("CAP_NET_ADMIN"; the prefix and case are optional).
func CapabilityNumber(name string) (uint8, bool) {
	n := strings.TrimPrefix(strings.ToUpper(name), "CAP_")
	for i, known := range capabilityNames {
		if known == n {
			return uint8(i), true
		}
	}
	return 0, false
}

// Mask returns the capabilities as the kernel's 64-bit set.
func Mask(caps []uint8) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << c
	}
	return m
}

func (c *Capabilities) validate() error {
	for _, set := range [][]uint8{c.Bounding, c.Effective, c.Inheritable, c.Permitted, c.Ambient} {
		for _, n := range set {
			if n > MaxCapability {
				return fmt.Errorf("capability %d is beyond %d", n, MaxCapability)
			}
		}
	}
	return nil
}
