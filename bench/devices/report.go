package main

import (
	"fmt"
	"strings"

	"github.com/smolvm/smol/bench/internal/guestrun"
	"github.com/smolvm/smol/bench/internal/stats"
)

// figures are what the guest measures, in the order it prints them.
var figures = []guestrun.Figure{
	{Key: "blk-seq-read", Label: "blk seq-read", Unit: "MB/s"},
	{Key: "blk-seq-write", Label: "blk seq-write", Unit: "MB/s"},
	{Key: "blk-rand-read", Label: "blk 4k-rand-read", Unit: "IOPS"},
	{Key: "fs-seq-write", Label: "9p seq-write", Unit: "MB/s"},
	{Key: "fs-seq-read", Label: "9p seq-read", Unit: "MB/s"},
	{Key: "fs-find", Label: "9p find (-fs-files, 10,000 by default)", Unit: "entries/s"},
	{Key: "tcp-send", Label: "tcp guest->host", Unit: "MB/s"},
	{Key: "tcp-recv", Label: "tcp host->guest", Unit: "MB/s"},
	{Key: "vsock-send", Label: "vsock guest->host (qemu: vhost)", Unit: "MB/s"},
	{Key: "vsock-recv", Label: "vsock host->guest (qemu: vhost)", Unit: "MB/s"},
}

// report prints each figure's medians over the rounds and their ratio,
// then the summary, and says whether every figure was measured for both
// VMMs. The ratios of each round's pair (run back to back) follow in
// brackets: other load in the box shifts both runs of a round alike, so
// their spread shows how far to trust the median's ratio.
func report(smolRuns, qemuRuns []map[string]float64, run map[string]bool) bool {
	complete := true
	var below, met []string
	measured := 0
	for _, f := range figures {
		if !run[figurePhase(f.Key)] {
			continue
		}
		measured++
		var pairs []string
		var sv, qv []float64
		for i := range min(len(smolRuns), len(qemuRuns)) {
			s, okS := smolRuns[i][f.Key]
			q, okQ := qemuRuns[i][f.Key]
			if okS {
				sv = append(sv, s)
			}
			if okQ {
				qv = append(qv, q)
			}
			if okS && okQ && q > 0 {
				pairs = append(pairs, fmt.Sprintf("%.2f", s/q))
			}
		}
		s, okS := stats.Median(sv), len(sv) > 0
		q, okQ := stats.Median(qv), len(qv) > 0
		if !okS || !okQ || q == 0 {
			fmt.Printf("%s: not measured (smol %d runs, qemu-microvm %d runs)\n", f.Label, len(sv), len(qv))
			complete = false
			continue
		}
		ratio := s / q
		fmt.Printf("%s: smol %.1f %s, qemu-microvm %.1f %s, ratio %.2f [rounds: %s]\n", f.Label, s, f.Unit, q, f.Unit, ratio, strings.Join(pairs, " "))
		if ratio >= 1 {
			met = append(met, fmt.Sprintf("%s %.2f", f.Label, ratio))
		} else {
			below = append(below, fmt.Sprintf("%s %.2f", f.Label, ratio))
		}
	}
	fmt.Printf("summary: %d of %d figures at or above 1.0x QEMU microvm", len(met), measured)
	if len(below) > 0 {
		fmt.Printf("; below: %s", strings.Join(below, ", "))
	}
	fmt.Println()
	fmt.Println("(vsock figures compare smol's userspace device with QEMU's in-kernel vhost-vsock)")
	return complete
}
