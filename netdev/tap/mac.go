package tap

import (
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"net"
)

// MAC address bits in the first octet (IEEE 802).
const (
	macMulticast      = 0x01
	macLocallyAdmined = 0x02
)

// ParseMAC parses a guest MAC address given by a person (--mac): six octets
// in the forms net.ParseMAC accepts (02:00:00:aa:bb:cc, 02-00-..., 0200.00aa.bbcc).
// Multicast and broadcast addresses and the all-zero address are refused:
// a NIC cannot own them.
func ParseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("MAC address %q: %w", s, err)
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("MAC address %q has %d octets, want 6", s, len(mac))
	}
	if mac[0]&macMulticast != 0 {
		return nil, fmt.Errorf("MAC address %q is a multicast or broadcast address", s)
	}
	if [6]byte(mac) == [6]byte{} {
		return nil, fmt.Errorf("MAC address %q is all zeros", s)
	}
	return mac, nil
}

// MACFromName derives the guest MAC for the TAP called name: a locally
// administered unicast address from a hash of the name. It is the default
// when no MAC is given, so a VM on the same TAP keeps its address (and its
// DHCP lease, neighbour entries) across restarts, while VMs on different
// TAPs differ. Collisions need two names with the same 46-bit hash.
func MACFromName(name string) net.HardwareAddr {
	h := fnv.New64a()
	h.Write([]byte("smol guest MAC\x00" + name))
	sum := h.Sum(nil)
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^macMulticast | macLocallyAdmined
	return mac
}

// RandomMAC returns a random locally administered unicast address, for
// callers that want a fresh identity per VM (for example forks).
func RandomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, fmt.Errorf("random MAC: %w", err)
	}
	mac[0] = mac[0]&^macMulticast | macLocallyAdmined
	return mac, nil
}
