package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/smolvm/smol/bench/internal/stats"
	"github.com/smolvm/smol/vmm"
)

// laterForks times forks of a parent that ran on since its previous
// fork: a quarter of its RAM holds data from before its first fork, and
// between two forks it runs (counting) and changes changedMiB of it. Such
// a fork freezes what changed since the first fork point into an overlay
// (vmm/memory/overlay.go), so it should cost the change, not the quarter.
// Each round is Resume, a wait for the guest to count on, the change,
// Pause, then Fork to the child's first KVM_RUN (timed); the child is
// closed at once.
func laterForks(kernel string, size uint64, n, changedMiB int) ([]float64, error) {
	parent, stop, err := pausedCounter(vmm.Config{Kernel: kernel, CPUs: 1, Memory: size})
	if err != nil {
		return nil, err
	}
	defer stop()
	// Above the guest's code and counter: the upper half of RAM below
	// the MMIO hole (or of all RAM, when it is smaller).
	mem := parent.Memory().Bytes()
	top := min(uint64(len(mem)), 3<<30)
	filled := mem[top/2 : top/2+size/4]
	for i := 0; i < len(filled); i += 4096 {
		filled[i] = byte(i>>12) | 1
	}
	first, err := parent.Fork(vmm.Config{})
	if err != nil {
		return nil, err
	}
	first.Close()
	var ms []float64
	for round := 0; round < n; round++ {
		if err := parent.Resume(); err != nil {
			return nil, err
		}
		if err := waitAdvance(parent); err != nil {
			return nil, err
		}
		if err := parent.Pause(); err != nil {
			return nil, err
		}
		// What the guest changed since: changedMiB, spread over the data.
		stride := max(len(filled)/(changedMiB<<8), 4096)
		for i, pages := 0, 0; i < len(filled) && pages < changedMiB<<8; i, pages = i+stride, pages+1 {
			filled[i] = byte(round) + 2
		}
		start := time.Now()
		child, err := parent.Fork(vmm.Config{})
		if err != nil {
			return nil, err
		}
		d, err := runToFirstEntry(child, start)
		if err != nil {
			return nil, err
		}
		ms = append(ms, d)
	}
	return ms, nil
}

// waitAdvance lets the paused-then-resumed guest count on a little.
func waitAdvance(m *vmm.Machine) error {
	count := func() uint64 {
		b, _ := m.Memory().Slice(0x200000, 8)
		return binary.LittleEndian.Uint64(b)
	}
	from := count()
	deadline := time.Now().Add(10 * time.Second)
	for count() < from+1000 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the guest stopped counting")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// printLaterForks reports the later forks' median against a fresh start's
// (fresh, in ms) from the same session.
func printLaterForks(label string, size uint64, ms []float64, changedMiB int, fresh float64) {
	f := stats.Median(ms)
	fmt.Printf("%-5s later fork (the parent ran on and changed %d MiB of the %d MiB it holds since its first fork) %.2f ms to the child's first KVM_RUN, fresh start %.2f ms: ratio %.2f\n",
		label, changedMiB, size/4>>20, f, fresh, f/fresh)
}
