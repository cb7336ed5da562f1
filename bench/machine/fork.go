package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/smolvm/smol/bench/internal/rounds"
	"github.com/smolvm/smol/bench/internal/stats"
)

// forkRounds times a fork to a child that answers an exec (`smol machine
// fork bench --name-prefix fK` then `smol machine exec fK-1 -- true`,
// process starts to exits) against `smol run -- true` in the same rounds:
// target ≤ 0.1. The machine must be running.
func (b *bench) forkRounds(n, maxReplaced int, logf func(string, ...any)) {
	var forkMs, toExecMs, runMs []float64
	res := rounds.Run(n, maxReplaced, func(i int) error {
		child := fmt.Sprintf("f%d-1", i)
		defer b.cmd("machine", "rm", "-f", child).Run()
		f, err := b.timed("machine", "fork", "bench", "--name-prefix", fmt.Sprintf("f%d", i))
		if err != nil {
			return b.recover(err)
		}
		e, err := b.timed("machine", "exec", child, "--", "true")
		if err != nil {
			return err
		}
		r, err := b.timed("run", "--cpus", "1", "--mem", "512M", "--", "true")
		if err != nil {
			return err
		}
		forkMs, toExecMs, runMs = append(forkMs, f), append(toExecMs, f+e), append(runMs, r)
		fmt.Printf("round %d: fork %.0f ms, fork + exec %.0f ms, run %.0f ms\n", i, f, f+e, r)
		return nil
	}, logf)
	fmt.Printf("fork rounds: %s\n", res.Summary(n))
	fmt.Printf("fork to a child answering exec -- true: %.0f ms (the fork command %.0f ms), smol run -- true %.0f ms: ratio %.2f (target <= 0.1)\n",
		median(toExecMs), median(forkMs), median(runMs), median(toExecMs)/median(runMs))
}

// forkMemory forks 8 children of a machine whose guest filled 512 MiB of
// tmpfs and reports what each costs the host: its private memory (guest
// pages it wrote since the fork, and its VMM's own) and its share of the
// parent's frozen RAM, which the children map and do not copy. Target:
// private ≤ what the child dirtied + 10 MiB.
func (b *bench) forkMemory(img string) {
	b.must("machine", "create", "memparent", "--image", img, "--cpus", "1", "--mem", "1G", "--storage", "2G")
	defer b.cmd("machine", "rm", "-f", "memparent").Run()
	b.must("machine", "start", "memparent")
	b.must("machine", "exec", "memparent", "--", "sh", "-c",
		"mkdir -p /mnt/t && mount -t tmpfs -o size=600m tmpfs /mnt/t && dd if=/dev/zero of=/mnt/t/fill bs=1M count=512 2>/dev/null")
	parent := stats.ReadProcMem(b.pid("memparent")) // before the fork remaps its RAM
	out, err := b.cmd("machine", "fork", "memparent", "--count", "8", "--name-prefix", "mem").Output()
	if err != nil {
		fatal(fmt.Errorf("fork of 8: %v", err))
	}
	children := strings.Fields(string(out))
	for _, c := range children {
		defer b.cmd("machine", "rm", "-f", c).Run()
	}
	var private, shared, pss []float64
	for _, c := range children {
		// Each child reads its whole copy of the file once: the pages it
		// touches are the parent's, shared, not copied.
		b.must("machine", "exec", c, "--", "sh", "-c", "cat /mnt/t/fill > /dev/null")
		pid := b.pid(c)
		m := stats.ReadProcMem(pid)
		private, shared, pss = append(private, m.Anon), append(shared, m.Shmem), append(pss, smapsPss(pid))
	}
	fmt.Printf("fork memory: parent guest filled 512 MiB (parent VMM RSS %.0f MiB, of it shared guest RAM %.0f MiB)\n", parent.RSS, parent.Shmem)
	fmt.Printf("8 children after each read all 512 MiB: private (anonymous) memory median %.1f MiB, max %.1f MiB; shared guest RAM mapped median %.0f MiB; PSS median %.0f MiB (target: private <= dirtied + 10 MiB)\n",
		median(private), maxOf(private), median(shared), median(pss))
}

// pid is the machine's VMM process.
func (b *bench) pid(name string) int {
	out, err := b.cmd("machine", "status", name, "--json").Output()
	if err != nil {
		fatal(err)
	}
	i := strings.Index(string(out), `"pid":`)
	if i < 0 {
		fatal(fmt.Errorf("no pid in %s", out))
	}
	rest := strings.TrimLeft(string(out[i+6:]), " ")
	end := strings.IndexAny(rest, ",}\n")
	pid, err := strconv.Atoi(strings.TrimSpace(rest[:end]))
	if err != nil {
		fatal(err)
	}
	return pid
}

// smapsPss is a process's proportional set size in MiB: each shared page
// counted once, split among the processes that map it.
func smapsPss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
