package vmm

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Adversarial guests for pause and fork, on the host's /dev/kvm.

// ramWriterCode writes an incrementing value (from 1) over [0x1100000, 0x4000000)
// (everything above its own code) again and again.
var ramWriterCode = []byte{
	0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1
	0x48, 0xbf, 0x00, 0x00, 0x10, 0x01, 0, 0, 0, 0, // outer: mov rdi, 0x1100000
	0x48, 0x89, 0x07, // inner: mov [rdi], rax
	0x48, 0x83, 0xc7, 0x08, // add rdi, 8
	0x48, 0xb9, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 0, // mov rcx, 0x4000000
	0x48, 0x39, 0xcf, // cmp rdi, rcx
	0x72, 0xea, // jb inner
	0x48, 0xff, 0xc0, // inc rax
	0xeb, 0xdb, // jmp outer
}

const writtenStart, writtenEnd = 0x1100000, 0x4000000

func ramHash(t *testing.T, m *Machine) [32]byte {
	t.Helper()
	b, err := m.Memory().Slice(writtenStart, writtenEnd-writtenStart)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestForkOfAGuestWritingAllItsRAM: a guest that never stops writing its
// memory forks into a child that has exactly the fork point's memory and
// then diverges; neither sees the other's writes.
func TestForkOfAGuestWritingAllItsRAM(t *testing.T) {
	parent := tinyMachine(t, ramWriterCode)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := parent.Pause(); err != nil {
		t.Fatal(err)
	}
	child, err := parent.Fork(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Stop(); child.Wait(); child.Close() })
	pb, _ := parent.Memory().Slice(writtenStart, writtenEnd-writtenStart)
	cb, _ := child.Memory().Slice(writtenStart, writtenEnd-writtenStart)
	if !bytes.Equal(pb, cb) {
		t.Fatal("the child's memory differs from the parent's at the fork point")
	}
	atFork := ramHash(t, child)
	if err := parent.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	parent.Pause()
	if ramHash(t, child) != atFork {
		t.Fatal("the parent's writes reached the child")
	}
	if ramHash(t, parent) == atFork {
		t.Fatal("the resumed parent did not write")
	}
	parentNow := ramHash(t, parent)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	child.Pause()
	if ramHash(t, child) == atFork {
		t.Error("the child did not run on")
	}
	if ramHash(t, parent) != parentNow {
		t.Error("the child's writes reached the paused parent")
	}
}

// TestPauseAndForkOfStubbornGuests: a guest halted with interrupts off
// and one that spins on MMIO writes both pause, fork, and their children
// run and stop.
func TestPauseAndForkOfStubbornGuests(t *testing.T) {
	for _, g := range []struct {
		name string
		code []byte
	}{
		{"cli-hlt", []byte{0xfa, 0xf4, 0xeb, 0xfd}}, // cli; hlt; jmp hlt
		{"mmio-spin", []byte{
			0x48, 0xbb, 0x00, 0x00, 0x00, 0xd0, 0, 0, 0, 0, // mov rbx, 0xd0000000 (no device there)
			0x88, 0x03, // loop: mov [rbx], al
			0xeb, 0xfc, // jmp loop
		}},
	} {
		t.Run(g.name, func(t *testing.T) {
			m := tinyMachine(t, g.code)
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			for i := 0; i < 20; i++ {
				if err := m.Pause(); err != nil {
					t.Fatal(err)
				}
				if err := m.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Pause(); err != nil {
				t.Fatal(err)
			}
			child, err := m.Fork(Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			child.Stop()
			if _, err := child.Wait(); err != nil {
				t.Errorf("the child ended with %v", err)
			}
			child.Close()
		})
	}
}

// TestHundredForkChildrenLeakNothing: 100 children restored from one
// hand-over, each run and closed, leave no descriptor or goroutine
// behind.
func TestHundredForkChildrenLeakNothing(t *testing.T) {
	parent := pausedCounter(t, 100)
	path := filepath.Join(t.TempDir(), "fork.state")
	ram, err := parent.ForkState(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ram.Close()
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	for i := 0; i < 100; i++ {
		child, err := RestoreFork(path, ram, Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		child.Stop()
		child.Wait()
		child.Close()
	}
	time.Sleep(100 * time.Millisecond)
	if now := openFDs(t); now > fds {
		t.Errorf("%d descriptors open after 100 children, %d before", now, fds)
	}
	if now := runtime.NumGoroutine(); now > goroutines+2 {
		t.Errorf("%d goroutines after 100 children, %d before", now, goroutines)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestSecondForkOfARunningParent: a parent that ran on after a fork forks
// again into a child with its memory of now, not of the first fork.
func TestSecondForkOfARunningParent(t *testing.T) {
	parent := tinyMachine(t, inLoopCode)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, parent, 1000)
	parent.Pause()
	first, err := parent.Fork(Config{})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	at := counter(t, parent)
	parent.Resume()
	// Any advance makes the parent's memory of now differ from the first
	// fork point's; a thousand IN exits is a tenth of a second in an idle
	// test box.
	waitAdvance(t, parent, at+1000)
	parent.Pause()
	at = counter(t, parent)
	second, err := parent.Fork(Config{})
	if err != nil {
		t.Fatal(err)
	}
	runFromForkPoint(t, second, at)
}
