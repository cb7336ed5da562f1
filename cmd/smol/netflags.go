package main

import (
	"github.com/smolvm/smol"
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
}

func addNetFlags(fs *pflag.FlagSet) *netFlags {
	n := &netFlags{}
	fs.BoolVar(&n.net, "net", false, "give the guest outbound network through smol's userspace gateway (rootless; DNS answered by the gateway)")
	fs.StringArrayVar(&n.allowHosts, "allow-host", nil, "with the network, allow only NAME[:PORT] (default ports 80 and 443; *.NAME for its subdomains); repeatable, implies --net")
	fs.StringArrayVar(&n.allowCIDRs, "allow-cidr", nil, "with the network, allow CIDR[:PORT] (every port by default; [V6PREFIX]:PORT); repeatable, implies --net")
	fs.StringArrayVar(&n.dns, "dns", nil, "DNS server the gateway asks, ADDR[:PORT] (default: the host's /etc/resolv.conf); repeatable, implies --net")
	return n
}

// config returns the network the flags ask for, nil for none. Any rule
// implies --net: a rule without a network would be a policy for nothing,
// and asking for one is asking for that network.
func (n *netFlags) config() (*smol.Net, error) {
	if !n.net && len(n.allowHosts) == 0 && len(n.allowCIDRs) == 0 && len(n.dns) == 0 {
		return nil, nil
	}
	if _, err := policy.ParseRules(n.allowHosts, n.allowCIDRs); err != nil {
		return nil, usageError{err.Error()}
	}
	return &smol.Net{AllowHosts: n.allowHosts, AllowCIDRs: n.allowCIDRs, DNS: n.dns}, nil
}
