package tap

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// bringUp sets the link up unless it already is, so that attaching to a
// persistent TAP an administrator prepared needs no privilege.
func (t *TAP) bringUp() error {
	link, err := netlink.LinkByName(t.name)
	if err != nil {
		return describeLinkError(t.name, "find", err)
	}
	if link.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return describeLinkError(t.name, "bringing up", err)
	}
	return nil
}

// Configure gives the host side of the interface the address addr (for
// example 10.0.2.1/24), which also routes addr's network to the guest.
// Setting an address it already has is not an error.
func (t *TAP) Configure(addr net.IPNet) error {
	if addr.IP == nil || addr.Mask == nil {
		return fmt.Errorf("configure TAP %s: address %v has no IP or mask", t.name, addr)
	}
	if ones, bits := addr.Mask.Size(); bits == 0 || (addr.IP.To4() != nil) != (bits == 32) {
		return fmt.Errorf("configure TAP %s: mask /%d does not fit IP %v", t.name, ones, addr.IP)
	}
	link, err := netlink.LinkByName(t.name)
	if err != nil {
		return describeLinkError(t.name, "find", err)
	}
	if err := netlink.AddrReplace(link, &netlink.Addr{IPNet: &addr}); err != nil {
		return describeLinkError(t.name, "adding "+addr.String()+" to", err)
	}
	return nil
}
