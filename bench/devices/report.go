package main

import (
	"fmt"
	"strings"

	"github.com/smolvm/smol/bench/internal/stats"
)

// figure is one measurement the guest reports (key, as nettool names it)
// and how the bench prints it.
type figure struct {
	key, label, unit string
}

var figures = []figure{
	{"blk-seq-read", "blk seq-read", "MB/s"},
	{"blk-seq-write", "blk seq-write", "MB/s"},
	{"blk-rand-read", "blk 4k-rand-read", "IOPS"},
	{"tcp-send", "tcp guest->host", "MB/s"},
	{"tcp-recv", "tcp host->guest", "MB/s"},
	{"vsock-send", "vsock guest->host (qemu: vhost)", "MB/s"},
	{"vsock-recv", "vsock host->guest (qemu: vhost)", "MB/s"},
}

// describeRun is one guest run's figures on one line.
func describeRun(got map[string]float64) string {
	var parts []string
	for _, f := range figures {
		if x, ok := got[f.key]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", f.key, x))
		} else {
			parts = append(parts, f.key+" -")
		}
	}
	return strings.Join(parts, ", ")
}

// report prints each figure's medians over the rounds and their ratio,
// then the summary, and says whether every figure was measured for both
// VMMs. The ratios of each round's pair (run back to back) follow in
// brackets: other load in the box shifts both runs of a round alike, so
// their spread shows how far to trust the median's ratio.
func report(smolRuns, qemuRuns []map[string]float64) bool {
	complete := true
	var below, met []string
	for _, f := range figures {
		var pairs []string
		var sv, qv []float64
		for i := range min(len(smolRuns), len(qemuRuns)) {
			s, okS := smolRuns[i][f.key]
			q, okQ := qemuRuns[i][f.key]
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
			fmt.Printf("%s: not measured (smol %d runs, qemu-microvm %d runs)\n", f.label, len(sv), len(qv))
			complete = false
			continue
		}
		ratio := s / q
		fmt.Printf("%s: smol %.1f %s, qemu-microvm %.1f %s, ratio %.2f [rounds: %s]\n", f.label, s, f.unit, q, f.unit, ratio, strings.Join(pairs, " "))
		if ratio >= 1 {
			met = append(met, fmt.Sprintf("%s %.2f", f.label, ratio))
		} else {
			below = append(below, fmt.Sprintf("%s %.2f", f.label, ratio))
		}
	}
	fmt.Printf("summary: %d of %d figures at or above 1.0x QEMU microvm", len(met), len(figures))
	if len(below) > 0 {
		fmt.Printf("; below: %s", strings.Join(below, ", "))
	}
	fmt.Println()
	fmt.Println("(vsock figures compare smol's userspace device with QEMU's in-kernel vhost-vsock)")
	return complete
}
