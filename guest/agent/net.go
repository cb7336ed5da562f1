package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
)

// configureNetwork brings up the loopback interface and, when the kernel
// command line has smol.net=ADDRESS/PREFIX,GATEWAY (the host gives the
// guest smol's userspace gateway), the guest's network interface: that
// address, a default route through the gateway, and the gateway as the
// only resolver in /etc/resolv.conf. (The gateway answers DNS sent to any
// address, so a resolver the image configured elsewhere gets the same
// answers; this file only saves it the detour.)
func configureNetwork() error {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	spec := cmdlineValue("smol.net")
	if spec == "" {
		return nil
	}
	cidr, gw, ok := strings.Cut(spec, ",")
	addr, err := netlink.ParseAddr(cidr)
	gateway := net.ParseIP(gw)
	if !ok || err != nil || gateway == nil {
		return fmt.Errorf("smol.net=%q: want ADDRESS/PREFIX,GATEWAY", spec)
	}
	nic, err := firstNIC()
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(nic, addr); err != nil {
		return fmt.Errorf("%s: add %s: %w", nic.Attrs().Name, cidr, err)
	}
	if err := netlink.LinkSetUp(nic); err != nil {
		return fmt.Errorf("%s: up: %w", nic.Attrs().Name, err)
	}
	route := &netlink.Route{LinkIndex: nic.Attrs().Index, Gw: gateway}
	if err := netlink.RouteAdd(route); err != nil {
		return fmt.Errorf("default route via %s: %w", gateway, err)
	}
	// The image's file may be a symlink (to a systemd-resolved stub):
	// replace it, do not write through it.
	os.Remove("/etc/resolv.conf")
	os.MkdirAll("/etc", 0o755)
	return os.WriteFile("/etc/resolv.conf", []byte("nameserver "+gateway.String()+"\n"), 0o644)
}

// firstNIC is the guest's network interface: the one that is not
// loopback (smol gives a guest at most one).
func firstNIC() (netlink.Link, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback == 0 && l.Type() == "device" {
			return l, nil
		}
	}
	return nil, fmt.Errorf("smol.net given but the guest has no network interface")
}
