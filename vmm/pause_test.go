package vmm

import (
	"encoding/binary"
	"testing"
	"time"
)

// countingGuest boots vCPUs that each add 1 to a 64-bit counter in guest
// RAM at counterAddr, forever.
const counterAddr = 0x200000

func countingGuest(t *testing.T, cpus int) *Machine {
	t.Helper()
	code := []byte{
		0x48, 0xff, 0x04, 0x25, 0x00, 0x00, 0x20, 0x00, // inc qword [0x200000]
		0xeb, 0xf6, // jmp back to the inc
	}
	m := tinyMachineN(t, code, cpus)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	return m
}

func counter(t *testing.T, m *Machine) uint64 {
	b, err := m.Memory().Slice(counterAddr, 8)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b)
}

// waitAdvance waits for the counter to move past from.
func waitAdvance(t *testing.T, m *Machine, from uint64) uint64 {
	t.Helper()
	// Generous: make test runs other packages' tests beside the box,
	// and a busy host slows the box's software CPU many times over. A
	// guest that stopped still fails, a minute later.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if c := counter(t, m); c > from {
			return c
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the guest's counter did not pass %d in a minute (it is at %d)", from, counter(t, m))
	return 0
}

func TestPauseParksEveryVCPU(t *testing.T) {
	m := countingGuest(t, 2)
	waitAdvance(t, m, 0)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if !m.Paused() {
		t.Error("Paused() is false after Pause")
	}
	c1 := counter(t, m)
	time.Sleep(300 * time.Millisecond)
	if c2 := counter(t, m); c2 != c1 {
		t.Fatalf("paused, the counter went from %d to %d", c1, c2)
	}
	if err := m.Pause(); err != nil { // again: nothing
		t.Fatal(err)
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	waitAdvance(t, m, c1)

	// Many quick cycles: every pause holds, every resume runs again.
	for i := 0; i < 50; i++ {
		if err := m.Pause(); err != nil {
			t.Fatalf("pause %d: %v", i, err)
		}
		c := counter(t, m)
		time.Sleep(2 * time.Millisecond)
		if counter(t, m) != c {
			t.Fatalf("pause %d did not hold", i)
		}
		if err := m.Resume(); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		waitAdvance(t, m, c)
	}
}

func TestStopWhilePaused(t *testing.T) {
	m := countingGuest(t, 2)
	waitAdvance(t, m, 0)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { m.Stop(); m.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop of a paused machine did not return")
	}
	if err := m.Pause(); err != ErrNotRunning {
		t.Errorf("Pause after stop: %v", err)
	}
}

// TestPauseAndResumeRaceTheClose: Pause and Resume called while the
// machine closes (API requests racing its end) return; none touches a
// vCPU, device or memory already released, and both refuse afterwards.
func TestPauseAndResumeRaceTheClose(t *testing.T) {
	m := countingGuest(t, 2)
	waitAdvance(t, m, 0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			m.Pause()
			m.Resume()
		}
	}()
	time.Sleep(50 * time.Millisecond)
	m.Close()
	close(stop)
	<-done
	if err := m.Pause(); err != ErrNotRunning {
		t.Errorf("Pause after Close: %v", err)
	}
	if err := m.Resume(); err != ErrNotRunning {
		t.Errorf("Resume after Close: %v", err)
	}
}
