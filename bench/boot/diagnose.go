package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/smolvm/smol/bench/internal/guestrun"
)

// milestones are kernel log lines whose time the diagnosis shows, in boot
// order.
var milestones = []struct{ label, text string }{
	{"crng ready", "crng init done"},
	{"initrd freed", "Freeing initrd memory"},
	{"kernel init freed", "Freeing unused kernel image"},
	{"/init runs", "Run /init as init process"},
}

var (
	logLine     = regexp.MustCompile(`^\[\s*([0-9]+\.[0-9]+)\] (.*)$`)
	initcallRet = regexp.MustCompile(`^initcall ([^ +]+)\+0x[0-9a-f]+/0x[0-9a-f]+ returned -?[0-9]+ after ([0-9]+) usecs`)
)

// kernelLog is what the diagnosis reads from one guest's dmesg.
type kernelLog struct {
	at        map[string]float64 // milestone label -> seconds since the kernel's clock started
	initcalls map[string]float64 // initcall -> ms
	total     float64            // ms in all initcalls
}

func parseKernelLog(text string) kernelLog {
	kl := kernelLog{at: map[string]float64{}, initcalls: map[string]float64{}}
	for _, line := range strings.Split(text, "\n") {
		m := logLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		t, _ := strconv.ParseFloat(m[1], 64)
		msg := m[2]
		for _, ms := range milestones {
			if _, seen := kl.at[ms.label]; !seen && strings.Contains(msg, ms.text) {
				kl.at[ms.label] = t
			}
		}
		if c := initcallRet.FindStringSubmatch(msg); c != nil {
			us, _ := strconv.ParseFloat(c[2], 64)
			kl.initcalls[c[1]] += us / 1000
			kl.total += us / 1000
		}
	}
	return kl
}

// diagnoseAll boots each contender once with initcall_debug and prints the
// guest's timeline side by side, then boots each smol build once with
// --exit-stats. The kernel log is read by dmesg after the init line, so the
// serial console (one exit per character) does not slow the timed boot.
func diagnoseAll(cs []*contender, initPath, timedInitrd, extra string, timeout time.Duration, outDir string) {
	initrd, err := guestrun.WriteInitramfs(initPath, "echo "+marker+"\ndmesg\necho "+endMarker+"\npoweroff -f\n")
	if err != nil {
		fmt.Printf("diagnose: %v\n", err)
		return
	}
	defer os.Remove(initrd)
	params := strings.TrimSpace(extra + " initcall_debug log_buf_len=1M")
	logs := map[string]kernelLog{}
	walls := map[string]sample{}
	for _, c := range cs {
		var console strings.Builder
		var s sample
		for try := 1; try <= 3; try++ {
			console.Reset()
			if s, err = boot(c, c.args(initrd, params), timeout, &console); err == nil {
				break
			}
			fmt.Printf("diagnose: %v\n", err)
		}
		if err != nil {
			continue
		}
		logs[c.name], walls[c.name] = parseKernelLog(console.String()), s
		if outDir != "" {
			os.MkdirAll(outDir, 0o755)
			os.WriteFile(filepath.Join(outDir, "boot-"+fileName(c.name)+".log"), []byte(console.String()), 0o644)
		}
	}

	fmt.Printf("\ndiagnosis (one boot each, kernel parameters %q; seconds on the guest kernel's clock, ms of wall time):\n", params)
	fmt.Printf("%-20s %12s %10s", "contender", "boot→init", "KVM_RUN")
	for _, m := range milestones {
		fmt.Printf(" %18s", m.label)
	}
	fmt.Printf(" %14s\n", "in initcalls")
	for _, c := range cs {
		kl, ok := logs[c.name]
		if !ok {
			continue
		}
		s := walls[c.name]
		run := "-"
		if c.smol {
			run = fmt.Sprintf("%.0f ms", s.firstRunMs)
		}
		fmt.Printf("%-20s %9.0f ms %10s", c.name, s.initMs, run)
		for _, m := range milestones {
			if t, ok := kl.at[m.label]; ok {
				fmt.Printf(" %16.3f s", t)
			} else {
				fmt.Printf(" %18s", "-")
			}
		}
		fmt.Printf(" %11.0f ms\n", kl.total)
	}

	// The slowest initcalls of any contender, for all of them.
	var names []string
	for _, kl := range logs {
		type ic struct {
			name string
			ms   float64
		}
		var l []ic
		for n, ms := range kl.initcalls {
			l = append(l, ic{n, ms})
		}
		sort.Slice(l, func(i, j int) bool { return l[i].ms > l[j].ms })
		for i := 0; i < len(l) && i < 12; i++ {
			if !slices.Contains(names, l[i].name) {
				names = append(names, l[i].name)
			}
		}
	}
	worst := func(n string) float64 {
		w := 0.0
		for _, kl := range logs {
			w = max(w, kl.initcalls[n])
		}
		return w
	}
	sort.Slice(names, func(i, j int) bool { return worst(names[i]) > worst(names[j]) })
	fmt.Printf("\nslowest initcalls (ms):\n%-36s", "initcall")
	for _, c := range cs {
		if _, ok := logs[c.name]; ok {
			fmt.Printf(" %18s", c.name)
		}
	}
	fmt.Println()
	for _, n := range names {
		fmt.Printf("%-36s", n)
		for _, c := range cs {
			if kl, ok := logs[c.name]; ok {
				fmt.Printf(" %18.1f", kl.initcalls[n])
			}
		}
		fmt.Println()
	}

	// The VMM's own start-up phases come with it (vmm's startup trace).
	os.Setenv("SMOL_STARTUP_TRACE", "1")
	defer os.Unsetenv("SMOL_STARTUP_TRACE")
	for _, c := range cs {
		if !c.smol {
			continue
		}
		var console strings.Builder
		args := append(c.args(timedInitrd, extra), "--exit-stats")
		if _, err := boot(c, args, timeout, &console); err != nil {
			fmt.Printf("diagnose: %v\n", err)
			continue
		}
		fmt.Printf("\n%s --exit-stats:\n", c.name)
		for _, line := range strings.Split(console.String(), "\n") {
			if strings.HasPrefix(line, "exit-stats:") || strings.HasPrefix(line, "kvm-stats:") || strings.HasPrefix(line, "boot-time:") || strings.HasPrefix(line, "startup:") {
				fmt.Println("  " + line)
			}
		}
	}
}

func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
