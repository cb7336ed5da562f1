package main

import (
	"fmt"
	"strconv"
)

// guestUpMarker is what the guest's rc prints first: the boot worked.
const guestUpMarker = "smol-bench-devices-guest-up"

// guestScript is the guest's /etc/rc: bring up the network, run every
// measurement against the host's servers, power off. A failed measurement
// prints why and the next one still runs.
func guestScript(n network, secs float64, qd, fsMiB int) string {
	s := strconv.FormatFloat(secs, 'f', -1, 64)
	return fmt.Sprintf(`echo `+guestUpMarker+`
ip addr add %[1]s/24 dev eth0
ip link set eth0 up
mkdir -p /mnt/share
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=mmap `+shareTag+` /mnt/share && nettool fs /mnt/share %[10]d
nettool disk /dev/vda %[3]s %[4]d
nettool tcp-send %[2]s:%[5]d %[3]s
nettool tcp-recv %[2]s:%[6]d %[3]s
nettool vsock-send %[7]d %[8]d %[3]s
nettool vsock-recv %[7]d %[9]d %[3]s
poweroff -f
`, n.guestIP, n.hostIP, s, qd, tcpSinkPort, tcpSourcePort, hostCID, vsockSinkPort, vsockSourcePort, fsMiB)
}
