package tap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// virtio-net feature bits (virtio 1.2, section 5.1.3) that concern the TAP.
// They are the spec's numbers, repeated here so that host networking does
// not depend on the device package.
const (
	featureCsum      = 1 << 0  // the guest sends partially checksummed frames
	featureGuestCsum = 1 << 1  // the guest accepts partially checksummed frames
	featureGuestTSO4 = 1 << 7  // the guest accepts TCPv4 super-frames
	featureGuestTSO6 = 1 << 8  // the guest accepts TCPv6 super-frames
	featureGuestECN  = 1 << 9  // ... with ECN (CWR) set
	featureHostTSO4  = 1 << 11 // the guest sends TCPv4 super-frames
	featureHostTSO6  = 1 << 12 // the guest sends TCPv6 super-frames
	featureHostECN   = 1 << 13 // ... with ECN (CWR) set
)

// hostOffloads are the guest-to-host offloads: the TUN driver accepts
// partially checksummed and GSO frames on write whatever TUNSETOFFLOAD
// says (it validates each header), so they need no configuration.
const hostOffloads = featureCsum | featureHostTSO4 | featureHostTSO6 | featureHostECN

// guestOffloads are the host-to-guest offloads, which TUNSETOFFLOAD turns
// on: only then does the kernel hand the TAP frames with partial checksums
// or GSO, which the guest must have agreed to receive.
const guestOffloads = featureGuestCsum | featureGuestTSO4 | featureGuestTSO6 | featureGuestECN

// probeOffloads finds which offloads the kernel supports by enabling every
// guest offload once, then disables them again until a driver negotiates.
func probeOffloads(fd int) (uint64, error) {
	supported := uint64(hostOffloads)
	all := unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN
	if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, all) == nil {
		supported |= guestOffloads
	} else if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM) == nil {
		supported |= featureGuestCsum
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0); err != nil {
		return 0, fmt.Errorf("disable offloads: %w", err)
	}
	return supported, nil
}

// tunOffloads maps negotiated virtio-net features to TUN_F_* flags,
// keeping the spec's dependencies: segmentation needs checksum offload, and
// ECN needs segmentation.
func tunOffloads(features uint64) int {
	if features&featureGuestCsum == 0 {
		return 0
	}
	flags := unix.TUN_F_CSUM
	if features&featureGuestTSO4 != 0 {
		flags |= unix.TUN_F_TSO4
	}
	if features&featureGuestTSO6 != 0 {
		flags |= unix.TUN_F_TSO6
	}
	if features&featureGuestECN != 0 && flags&(unix.TUN_F_TSO4|unix.TUN_F_TSO6) != 0 {
		flags |= unix.TUN_F_TSO_ECN
	}
	return flags
}

// SupportedOffloads returns the virtio-net offload feature bits this TAP
// can honour, for the device to offer.
func (t *TAP) SupportedOffloads() uint64 { return t.supported }

// SetOffloads configures the TAP for the virtio-net features the driver
// negotiated: only the guest-receive offloads it accepted (GUEST_CSUM,
// GUEST_TSO4/6, GUEST_ECN) are enabled, so the kernel computes checksums
// and segments frames for a guest that cannot.
func (t *TAP) SetOffloads(features uint64) error {
	flags := tunOffloads(features & t.supported)
	var ierr error
	if err := t.raw.Control(func(fd uintptr) {
		ierr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, flags)
	}); err != nil {
		return fmt.Errorf("TAP %s: set offloads: %w", t.name, err)
	}
	if ierr != nil {
		return fmt.Errorf("TAP %s: set offloads %#x: %w", t.name, flags, ierr)
	}
	return nil
}
