package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// With -trace, each round also prints where its time went, every point in
// milliseconds since the round's RunPodSandbox was sent: when the shim's
// server and the machine's VMM process started (from /proc, to the
// kernel's 10 ms tick), the VMM's start-up phases and the moment its
// agent answered (SMOL_STARTUP_TRACE, from the machine's vmm.log), and
// the bench's own CRI answers; then the same for `smol run -- true`
// (its stderr's trace). Lined up, the two say which part of a pod start
// `smol run` does not pay.

// milestone is one point of a timeline.
type milestone struct {
	at   time.Time
	what string
}

// printTimeline prints milestones in order, relative to began.
func printTimeline(title string, began time.Time, ms []milestone) {
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].at.Before(ms[j].at) })
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", title)
	for _, m := range ms {
		fmt.Fprintf(&b, "\n  %7.0f ms  %s", float64(m.at.Sub(began).Microseconds())/1000, m.what)
	}
	fmt.Println(b.String())
}

// startupPhases reads the VMM's start-up trace lines ("startup: 12.34 ms
// 15:04:05.000 phase") from out. The wall clock has no date: it is taken
// to be on the day of near, the round's start.
func startupPhases(out []byte, near time.Time, prefix string) []milestone {
	var ms []milestone
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "startup:" || f[2] != "ms" {
			continue
		}
		since, err1 := strconv.ParseFloat(f[1], 64)
		clock, err2 := time.ParseInLocation("15:04:05.000", f[3], near.Location())
		if err1 != nil || err2 != nil {
			continue
		}
		at := time.Date(near.Year(), near.Month(), near.Day(), clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), near.Location())
		if len(ms) == 0 {
			// The program's start, which the first line's offset gives.
			ms = append(ms, milestone{at.Add(-time.Duration(since * float64(time.Millisecond))), prefix + "program start"})
		}
		ms = append(ms, milestone{at, prefix + strings.Join(f[4:], " ")})
	}
	return ms
}

// shimProcesses returns the start of every running process whose command
// line has all of words, from /proc (starttime, in clock ticks since the
// host booted).
func shimProcesses(what string, words ...string) []milestone {
	boot, ok := bootTime()
	if !ok {
		return nil
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var ms []milestone
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		all := true
		for _, w := range words {
			all = all && strings.Contains(args, w)
		}
		if !all {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's name, which ends with the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 20 {
			continue
		}
		ticks, err := strconv.ParseUint(f[19], 10, 64) // field 22 of stat
		if err != nil {
			continue
		}
		const hz = 100 // USER_HZ on Linux
		ms = append(ms, milestone{boot.Add(time.Duration(ticks) * time.Second / hz), what + " process started"})
	}
	return ms
}

// bootTime is when the host booted, on the wall clock: now less
// /proc/uptime, the clock process start times count on.
func bootTime() (time.Time, bool) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return time.Time{}, false
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Now().Add(-time.Duration(up * float64(time.Second))), true
}

// vmmLogs returns the contents of every machine's vmm.log under the
// shims' SMOL_HOME.
func vmmLogs(shimRoot string) []byte {
	paths, _ := filepath.Glob(filepath.Join(shimRoot, "home", "machines", "*", "vmm.log"))
	var all []byte
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		all = append(all, b...)
	}
	return all
}
