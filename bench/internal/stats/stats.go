// Package stats has the figures the benchmarks report.
package stats

import "sort"

// Median of xs (0 for none); the figure every benchmark quotes, so that
// one slow or lucky run does not move it.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
