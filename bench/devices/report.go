package main

import (
	"fmt"
	"sort"
	"strings"
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

// report prints each figure's medians and ratio, then the summary, and
// says whether every figure was measured for both VMMs.
func report(smolRuns, qemuRuns map[string][]float64) bool {
	complete := true
	var below, met []string
	for _, f := range figures {
		s, okS := median(smolRuns[f.key])
		q, okQ := median(qemuRuns[f.key])
		if !okS || !okQ || q == 0 {
			fmt.Printf("%s: not measured (smol %d runs, qemu-microvm %d runs)\n", f.label, len(smolRuns[f.key]), len(qemuRuns[f.key]))
			complete = false
			continue
		}
		ratio := s / q
		fmt.Printf("%s: smol %.1f %s, qemu-microvm %.1f %s, ratio %.2f\n", f.label, s, f.unit, q, f.unit, ratio)
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

func median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}
