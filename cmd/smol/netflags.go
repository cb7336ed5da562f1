package main

import (
	"fmt"
	"net/netip"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/netdev/gateway"
	"github.com/smolvm/smol/netdev/policy"
	"github.com/spf13/pflag"
)

// netFlags are the network flags `smol run` and `smol machine create`
// share.
type netFlags struct {
	net        bool
	allowHosts []string
	allowCIDRs []string
	dns        []string
	publish    []string
}

func addNetFlags(fs *pflag.FlagSet) *netFlags {
	n := &netFlags{}
	fs.BoolVar(&n.net, "net", false, "give the guest outbound network through smol's userspace gateway (rootless; DNS answered by the gateway)")
	fs.StringArrayVar(&n.allowHosts, "allow-host", nil, "with the network, allow only NAME[:PORT] (default ports 80 and 443; *.NAME for its subdomains); repeatable, implies --net")
	fs.StringArrayVar(&n.allowCIDRs, "allow-cidr", nil, "with the network, allow CIDR[:PORT] (every port by default; [V6PREFIX]:PORT); repeatable, implies --net")
	fs.StringArrayVarP(&n.publish, "publish", "p", nil, "publish the guest's GUESTPORT on the host: [HOSTADDR:]HOSTPORT:GUESTPORT[/tcp|/udp] (HOSTADDR default 127.0.0.1); repeatable, works without --net")
	fs.StringArrayVar(&n.dns, "dns", nil, "DNS server the gateway asks, ADDR[:PORT] (default: the host's /etc/resolv.conf); repeatable, implies --net")
	return n
}

// config returns the network the flags ask for, nil for none. Any rule
// implies --net: a rule without a network would be a policy for nothing,
// and asking for one is asking for that network. -p alone gives the guest
// a network for its published ports and no way out.
func (n *netFlags) config() (*smol.Net, error) {
	egress := n.net || len(n.allowHosts) > 0 || len(n.allowCIDRs) > 0 || len(n.dns) > 0
	if !egress && len(n.publish) == 0 {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, s := range n.publish {
		p, err := gateway.ParsePort(s)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		key := p.Proto + " " + p.Host.String()
		if seen[key] {
			return nil, usageError{fmt.Sprintf("-p: host port %s/%s is published twice", p.Host, p.Proto)}
		}
		seen[key] = true
	}
	if _, err := policy.ParseRules(n.allowHosts, n.allowCIDRs); err != nil {
		return nil, usageError{err.Error()}
	}
	for _, s := range n.dns {
		if _, err := netip.ParseAddrPort(s); err != nil {
			if _, err := netip.ParseAddr(s); err != nil {
				return nil, usageError{fmt.Sprintf("--dns %q: want an IP address, optionally with :PORT", s)}
			}
		}
	}
	return &smol.Net{AllowHosts: n.allowHosts, AllowCIDRs: n.allowCIDRs, DNS: n.dns, Publish: n.publish, NoEgress: !egress}, nil
}
