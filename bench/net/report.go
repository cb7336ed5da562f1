package main

import (
	"fmt"

	"github.com/smolvm/smol/bench/internal/guestrun"
	"github.com/smolvm/smol/bench/internal/stats"
)

// figures are what the guest measures, in the order it prints them.
var figures = []guestrun.Figure{
	{Key: "tcp-send", Label: "tcp guest->host", Unit: "MB/s"},
	{Key: "tcp-recv", Label: "tcp host->guest", Unit: "MB/s"},
	{Key: "tcp-connect", Label: "tcp connection setup", Unit: "conn/s"},
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
				if x, ok := r[f.Key]; ok {
					xs = append(xs, x)
				}
			}
			if len(xs) > 0 {
				meds[v.name][f.Key] = stats.Median(xs)
			}
		}
	}
	fmt.Println("medians:")
	for _, f := range figures {
		line := fmt.Sprintf("  %-22s", f.Label)
		for _, v := range vmms {
			if m, ok := meds[v.name][f.Key]; ok {
				line += fmt.Sprintf("  %s %.1f %s", v.name, m, f.Unit)
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
		line := fmt.Sprintf("  %-22s", f.Label)
		for _, v := range vmms {
			if v.name == "smol-gateway" {
				continue
			}
			g, okG := gw[f.Key]
			p, okP := meds[v.name][f.Key]
			if okG && okP && p > 0 {
				line += fmt.Sprintf("  vs %s %.2f", v.name, g/p)
			} else {
				line += fmt.Sprintf("  vs %s -", v.name)
			}
		}
		fmt.Println(line)
	}
}
