package main

import (
	"fmt"
	"strings"

	"github.com/smolvm/smol/bench/internal/stats"
)

// figure is one measurement the guest reports and how it is printed.
type figure struct {
	key, label, unit string
}

var figures = []figure{
	{"tcp-send", "tcp guest->host", "MB/s"},
	{"tcp-recv", "tcp host->guest", "MB/s"},
	{"tcp-connect", "tcp connection setup", "conn/s"},
}

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

// report prints each figure's median per VMM and smol-gateway's ratio
// against every other.
func report(vmms []*vmm, runs map[string][]map[string]float64) {
	meds := map[string]map[string]float64{}
	for _, v := range vmms {
		meds[v.name] = map[string]float64{}
		for _, f := range figures {
			var xs []float64
			for _, r := range runs[v.name] {
				if x, ok := r[f.key]; ok {
					xs = append(xs, x)
				}
			}
			if len(xs) > 0 {
				meds[v.name][f.key] = stats.Median(xs)
			}
		}
	}
	fmt.Println("medians:")
	for _, f := range figures {
		line := fmt.Sprintf("  %-22s", f.label)
		for _, v := range vmms {
			if m, ok := meds[v.name][f.key]; ok {
				line += fmt.Sprintf("  %s %.1f %s", v.name, m, f.unit)
			} else {
				line += fmt.Sprintf("  %s -", v.name)
			}
		}
		fmt.Println(line)
	}
	gw, ok := meds["smol-gateway"]
	if !ok {
		return
	}
	fmt.Println("ratios (smol-gateway / peer, higher is better for smol):")
	for _, f := range figures {
		line := fmt.Sprintf("  %-22s", f.label)
		for _, v := range vmms {
			if v.name == "smol-gateway" {
				continue
			}
			g, okG := gw[f.key]
			p, okP := meds[v.name][f.key]
			if okG && okP && p > 0 {
				line += fmt.Sprintf("  vs %s %.2f", v.name, g/p)
			} else {
				line += fmt.Sprintf("  vs %s -", v.name)
			}
		}
		fmt.Println(line)
	}
}
