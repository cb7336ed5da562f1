package main

import (
	"fmt"
	"strconv"
	"strings"
)

// guestUpMarker is what the guest's rc prints first: the boot worked.
const guestUpMarker = "smol-bench-devices-guest-up"

// phases are the guest's measurements, each a few lines of its rc, by the
// name -phases takes, in the order the guest runs them; figurePhase says
// which phase measures a figure (its key's first word).
var phases = []string{"fs", "blk", "tcp", "vsock"}

func figurePhase(key string) string { p, _, _ := strings.Cut(key, "-"); return p }

// guestScript is the guest's /etc/rc: bring up the network, run the
// chosen measurements against the host's servers, power off. A failed
// measurement prints why and the next one still runs.
func guestScript(n network, secs float64, qd, fsMiB int, run map[string]bool) string {
	s := strconv.FormatFloat(secs, 'f', -1, 64)
	steps := map[string]string{
		"fs": `mkdir -p /mnt/share
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=mmap ` + shareTag + fmt.Sprintf(` /mnt/share && nettool fs /mnt/share %d
`, fsMiB),
		"blk":   fmt.Sprintf("nettool disk /dev/vda %s %d\n", s, qd),
		"tcp":   fmt.Sprintf("nettool tcp-send %[1]s:%[2]d %[4]s\nnettool tcp-recv %[1]s:%[3]d %[4]s\n", n.hostIP, tcpSinkPort, tcpSourcePort, s),
		"vsock": fmt.Sprintf("nettool vsock-send %[1]d %[2]d %[4]s\nnettool vsock-recv %[1]d %[3]d %[4]s\n", hostCID, vsockSinkPort, vsockSourcePort, s),
	}
	var b strings.Builder
	fmt.Fprintf(&b, "echo %s\nip addr add %s/24 dev eth0\nip link set eth0 up\n", guestUpMarker, n.guestIP)
	for _, p := range phases {
		if run[p] {
			b.WriteString(steps[p])
		}
	}
	b.WriteString("poweroff -f\n")
	return b.String()
}
