// Command fork measures the VMM's side of forking a paused machine, from
// the Fork call to the child's first KVM_RUN, against creating and
// starting the same machine afresh (vmm.New and Start to the first
// KVM_RUN), for several RAM sizes, in one session; a restore from a
// snapshot file and from a fork's hand-over (what a child in its own VMM
// process does), each to the first KVM_RUN; and later forks of a parent
// that ran on and changed some of its memory since its first fork
// (later.go). The guest is a tiny
// counting program (no kernel), so it runs on the host's own /dev/kvm,
// PVM included: this measures the VMM, not a guest. Then the disk side
// (disk.go): each child's writable layer against a copy of the disk.
//
//	go run ./bench/fork -n 20 -sizes 256M,1G,4G
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/bench/internal/stats"
	"github.com/smolvm/smol/internal/testkernel"
	"github.com/smolvm/smol/vmm"
)

// countingCode adds 1 to the qword at 0x200000 forever.
var countingCode = []byte{0x48, 0xff, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00, 0xeb, 0xf6}

func main() {
	n := flag.Int("n", 20, "forks and fresh starts per size")
	sizes := flag.String("sizes", "256M,1G,4G", "guest RAM sizes")
	diskMiB := flag.Int("disk-data", 512, "MiB of data on the disk of the disk phase (0: no disk phase)")
	diskOnly := flag.Bool("disk-only", false, "run only the disk phase")
	changedMiB := flag.Int("later-changed", 4, "MiB the parent changes between two later forks")
	flag.Parse()
	os.Setenv("SMOL_ALLOW_PVM", "1")
	dir, err := os.MkdirTemp("", "smol-bench-fork-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	kernel := filepath.Join(dir, "vmlinux")
	if err := os.WriteFile(kernel, testkernel.ELF(testkernel.MachineX86_64, countingCode), 0o644); err != nil {
		fatal(err)
	}
	if *diskOnly {
		*sizes = ""
	}
	if *sizes != "" {
		fmt.Printf("fork bench: %d forks and %d fresh starts per size, 1 vCPU, host /dev/kvm\n", *n, *n)
	}
	for _, s := range strings.FieldsFunc(*sizes, func(r rune) bool { return r == ',' }) {
		size, err := smol.ParseSize(s)
		if err != nil {
			fatal(err)
		}
		r, err := measure(kernel, size, *n)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", s, err))
		}
		f, c := stats.Median(r.fork), stats.Median(r.fresh)
		fmt.Printf("%-5s fork %.2f ms (of which memslots %.2f; Fork %.2f + to first KVM_RUN %.2f)  fresh start %.2f ms (memslots %.2f)  ratio %.2f\n",
			s, f, stats.Median(r.forkSlots), stats.Median(r.forkCall), stats.Median(r.forkEnter), c, stats.Median(r.newSlots), f/c)
		fmt.Printf("%-5s restore from a snapshot file (%.1f MiB on disk) %.2f ms, from a fork's hand-over %.2f ms, to the first KVM_RUN (target <= 10 ms for 1G)\n",
			s, r.snapshotMB, stats.Median(r.restore), stats.Median(r.handOver))
		later, err := laterForks(kernel, size, *n, *changedMiB)
		if err != nil {
			fatal(fmt.Errorf("%s: later forks: %w", s, err))
		}
		printLaterForks(s, size, later, *changedMiB, c)
	}
	if *diskMiB > 0 {
		if err := benchDisks(dir, min(*n, 5), 8, *diskMiB); err != nil {
			fatal(err)
		}
	}
}

// result holds milliseconds per run: the whole, and its two parts (the
// call that builds the machine, then Start to the first KVM_RUN).
type result struct {
	fork, forkCall, forkEnter, forkSlots []float64
	fresh, newSlots                      []float64
	restore, handOver                    []float64 // from a snapshot file; from a fork's hand-over (another process's path)
	snapshotMB                           float64   // the snapshot file's allocated size
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pausedCounter starts the counting guest and pauses it once it counts;
// stop ends it.
func pausedCounter(cfg vmm.Config) (m *vmm.Machine, stop func(), err error) {
	if m, err = vmm.New(cfg); err != nil {
		return nil, nil, err
	}
	stop = func() { m.Stop(); m.Wait(); m.Close() }
	if err = m.Start(); err == nil {
		if err = waitCount(m); err == nil {
			err = m.Pause()
		}
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return m, stop, nil
}

func measure(kernel string, size uint64, n int) (r result, err error) {
	cfg := vmm.Config{Kernel: kernel, CPUs: 1, Memory: size}
	parent, stop, err := pausedCounter(cfg)
	if err != nil {
		return r, err
	}
	defer stop()
	for i := 0; i < n; i++ {
		start := time.Now()
		child, err := parent.Fork(vmm.Config{})
		if err != nil {
			return r, err
		}
		built := time.Since(start)
		r.forkSlots = append(r.forkSlots, ms(child.MemslotTime()))
		d, err := runToFirstEntry(child, start)
		if err != nil {
			return r, err
		}
		r.fork, r.forkCall, r.forkEnter = append(r.fork, d), append(r.forkCall, ms(built)), append(r.forkEnter, d-ms(built))

		start = time.Now()
		m, err := vmm.New(cfg)
		if err != nil {
			return r, err
		}
		r.newSlots = append(r.newSlots, ms(m.MemslotTime()))
		if d, err = runToFirstEntry(m, start); err != nil {
			return r, err
		}
		r.fresh = append(r.fresh, d)
	}
	if err := measureRestores(parent, cfg, n, &r); err != nil {
		return r, err
	}
	return r, nil
}

// measureRestores times vmm.Restore from a snapshot file of the paused
// parent, and vmm.RestoreFork from its hand-over (state file and sealed
// RAM, what a fork's child process gets), each to the first KVM_RUN.
func measureRestores(parent *vmm.Machine, cfg vmm.Config, n int, r *result) error {
	dir, err := os.MkdirTemp("", "smol-bench-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "snap")
	if err := parent.Snapshot(file, vmm.SnapshotOptions{}); err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err == nil {
		r.snapshotMB = float64(st.Blocks*512) / (1 << 20)
	}
	handOver := filepath.Join(dir, "fork.state")
	ram, err := parent.ForkState(handOver, nil)
	if err != nil {
		return err
	}
	defer ram.Close()
	for i := 0; i < n; i++ {
		start := time.Now()
		m, err := vmm.Restore(file, vmm.Config{})
		if err != nil {
			return err
		}
		d, err := runToFirstEntry(m, start)
		if err != nil {
			return err
		}
		r.restore = append(r.restore, d)
		start = time.Now()
		if m, err = vmm.RestoreFork(handOver, ram, vmm.Config{}); err != nil {
			return err
		}
		if d, err = runToFirstEntry(m, start); err != nil {
			return err
		}
		r.handOver = append(r.handOver, d)
	}
	return nil
}

// runToFirstEntry starts m, waits for its vCPU's first KVM_RUN and
// returns the milliseconds since start; m is closed.
func runToFirstEntry(m *vmm.Machine, start time.Time) (float64, error) {
	defer func() { m.Stop(); m.Wait(); m.Close() }()
	if err := m.Start(); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.FirstRun().IsZero() {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the vCPU never entered the guest")
		}
		time.Sleep(20 * time.Microsecond)
	}
	return float64(m.FirstRun().Sub(start).Microseconds()) / 1000, nil
}

func waitCount(m *vmm.Machine) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := m.Memory().Slice(0x200000, 8)
		if err != nil {
			return err
		}
		if binary.LittleEndian.Uint64(b) > 0 {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("the guest never counted")
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}
