package main

import (
	"fmt"
	"strconv"
)

// guestUpMarker is what the guest's rc prints first: the boot worked.
const guestUpMarker = "smol-bench-net-guest-up"

// guestNet is how a guest configures its network and where it finds the
// host's servers.
type guestNet struct {
	cidr, gateway, host string
	mtu                 int // 0: the driver's
}

// guestScript is the guest's /etc/rc: configure the network, run each
// measurement, power off (a second after the last, so that the console
// has carried its line out).
func guestScript(n guestNet, secs float64) string {
	s := strconv.FormatFloat(secs, 'f', -1, 64)
	mtu := ""
	if n.mtu != 0 {
		mtu = fmt.Sprintf("ip link set eth0 mtu %d\n", n.mtu)
	}
	route := ""
	if n.gateway != "" {
		route = "ip route add default via " + n.gateway + "\n"
	}
	return fmt.Sprintf(`echo `+guestUpMarker+`
ip addr add %[1]s dev eth0
%[2]sip link set eth0 up
%[3]snettool tcp-send %[4]s:%[6]d %[5]s
nettool tcp-recv %[4]s:%[7]d %[5]s
nettool tcp-connect %[4]s:%[8]d %[5]s
sleep 1
poweroff -f
`, n.cidr, mtu, route, n.host, s, sinkPort, sourcePort, connectPort)
}
