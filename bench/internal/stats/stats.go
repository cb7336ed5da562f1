// Package stats has the figures the benchmarks report.
package stats

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

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

// ProcMem is a process's memory from /proc/PID/status, in MiB.
type ProcMem struct {
	RSS, Anon, File, Shmem float64
	Threads                int
}

// VMM is a VMM's resident memory outside guest RAM, which is a shared
// memfd mapping (RssShmem): its private memory and the binary's pages.
func (m ProcMem) VMM() float64 { return m.RSS - m.Shmem }

// ReadProcMem reads process pid's memory (zero when it is gone).
func ReadProcMem(pid int) ProcMem {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcMem{}
	}
	var m ProcMem
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			m.RSS = v / 1024
		case "RssAnon:":
			m.Anon = v / 1024
		case "RssFile:":
			m.File = v / 1024
		case "RssShmem:":
			m.Shmem = v / 1024
		case "Threads:":
			m.Threads = int(v)
		}
	}
	return m
}
