package i8042

import (
	"testing"

	"github.com/smolvm/smol/devices"
)

var _ devices.Device = (*Controller)(nil)

func TestStatusShowsReadyForCommand(t *testing.T) {
	c := New(nil)
	for _, offset := range []uint64{dataOffset, statusOffset} {
		b := []byte{0xaa}
		c.Read(offset, b)
		if b[0] != 0 {
			t.Fatalf("port %#x reads %#x, want 0", DataPort+offset, b[0])
		}
	}
	b := []byte{0}
	c.Read(1, b)
	if b[0] != 0xff {
		t.Fatalf("port 0x61 reads %#x, want 0xff (not ours)", b[0])
	}
}

// TestLinuxKeyboardReboot replays Linux's BOOT_KBD loop: wait for the input
// buffer to empty, then write 0xFE to the command port, ten times.
func TestLinuxKeyboardReboot(t *testing.T) {
	calls := 0
	c := New(func() { calls++ })
	for i := 0; i < 10; i++ {
		status := []byte{0xff}
		for tries := 0; ; tries++ {
			c.Read(statusOffset, status)
			if status[0]&0x02 == 0 {
				break
			}
			if tries > 0x10000 {
				t.Fatal("input buffer never empties: Linux's kb_wait would time out")
			}
		}
		c.Write(statusOffset, []byte{CommandPulseReset})
	}
	if calls != 10 || c.Resets() != 10 {
		t.Fatalf("reset callback ran %d times (counter %d), want 10", calls, c.Resets())
	}
}

func TestEveryEvenPulseCommandResets(t *testing.T) {
	calls := 0
	c := New(func() { calls++ })
	for cmd := 0xf0; cmd <= 0xfe; cmd += 2 {
		c.Write(statusOffset, []byte{byte(cmd)})
	}
	if calls != 8 {
		t.Fatalf("%d resets from the eight commands that pulse bit 0", calls)
	}
}

func TestOtherWritesAreIgnored(t *testing.T) {
	calls := 0
	c := New(func() { calls++ })
	c.Write(statusOffset, []byte{0xaa})            // controller self test
	c.Write(statusOffset, []byte{0xfe, 0x00})      // wrong width
	c.Write(dataOffset, []byte{CommandPulseReset}) // 0xFE to the data port is keyboard data
	c.Write(2, []byte{CommandPulseReset})          // not our port
	c.Write(statusOffset, []byte{0xfd})            // pulses output bit 1 (A20), not reset
	c.Write(statusOffset, []byte{0xff})            // pulses nothing
	if calls != 0 {
		t.Fatalf("reset callback ran %d times for writes that are not a reset", calls)
	}
	if err := c.Restore(c.State()); err != nil {
		t.Fatal(err)
	}
}
