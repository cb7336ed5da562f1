package tap

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// Errors Create and Configure return for mistakes a person can fix; test for
// them with errors.Is. The returned errors name the interface and also wrap
// the system call's errno.
var (
	// ErrNeedsNetAdmin: the process lacks CAP_NET_ADMIN (run as root, grant
	// the capability, or pre-create a persistent TAP owned by the user).
	ErrNeedsNetAdmin = errors.New("needs CAP_NET_ADMIN")
	// ErrInvalidName: the interface name is empty of meaning to the kernel:
	// too long (at most 15 bytes), "." or "..", or containing '/', ':' or
	// white space.
	ErrInvalidName = errors.New("invalid interface name")
	// ErrNoTunDevice: /dev/net/tun does not exist (the tun module is not
	// loaded, or a container did not pass the device through).
	ErrNoTunDevice = errors.New("/dev/net/tun is missing")
	// ErrBusy: another process has the TAP open.
	ErrBusy = errors.New("interface is in use by another process")
	// ErrNotTAP: the name belongs to an existing interface that is not a
	// TAP (an Ethernet card, a TUN device, a bridge).
	ErrNotTAP = errors.New("interface exists and is not a TAP")
)

// maxNameLen is IFNAMSIZ minus the terminating NUL.
const maxNameLen = 15

// validName applies the kernel's dev_valid_name rules, so a bad name fails
// with a clear message instead of EINVAL from the ioctl. The empty name is
// valid: the kernel then picks "tapN".
func validName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("TAP name %q %s: %w", name, why, ErrInvalidName)
	}
	switch {
	case len(name) > maxNameLen:
		return bad(fmt.Sprintf("is longer than %d bytes", maxNameLen))
	case name == "." || name == "..":
		return bad("is reserved")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return bad(fmt.Sprintf("contains %q", c))
		}
	}
	return nil
}

// describeSetIffError turns TUNSETIFF's errno into a sentence.
func describeSetIffError(name string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("creating TAP %s %w (or a persistent TAP owned by this user): %w", name, ErrNeedsNetAdmin, err)
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("TAP %s: %w: %w", name, ErrBusy, err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("TAP %s: %w: %w", name, ErrNotTAP, err)
	}
	return fmt.Errorf("create TAP %s: %w", name, err)
}

// describeOpenError explains why /dev/net/tun could not be opened.
func describeOpenError(name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ENXIO):
		return fmt.Errorf("creating TAP %s: %w (load the tun module or pass the device into the container): %w", name, ErrNoTunDevice, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("creating TAP %s %w (cannot open /dev/net/tun): %w", name, ErrNeedsNetAdmin, err)
	}
	return fmt.Errorf("creating TAP %s: open /dev/net/tun: %w", name, err)
}

// describeLinkError explains a netlink failure on the interface.
func describeLinkError(name, what string, err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("%s TAP %s %w: %w", what, name, ErrNeedsNetAdmin, err)
	}
	return fmt.Errorf("%s TAP %s: %w", what, name, err)
}
