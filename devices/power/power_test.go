package power

import (
	"testing"

	"github.com/smolvm/smol/devices"
)

var _ devices.Device = (*Device)(nil)

type recorder struct{ powerOffs, resets int }

func newRecorded() (*Device, *recorder) {
	r := &recorder{}
	return New(func() { r.powerOffs++ }, func() { r.resets++ }), r
}

func port(p uint64) uint64 { return p - SleepControlPort }

// TestLinuxPowerOff replays acpi_hw_extended_sleep(ACPI_STATE_S5).
func TestLinuxPowerOff(t *testing.T) {
	d, r := newRecorded()
	d.Write(port(SleepStatusPort), []byte{0x80}) // clear WAK_STS
	d.Write(port(SleepControlPort), []byte{SleepTypeS5<<2 | 1<<5})
	if r.powerOffs != 1 || r.resets != 0 {
		t.Fatalf("power offs = %d, resets = %d; want 1, 0", r.powerOffs, r.resets)
	}
	status := []byte{0xff}
	d.Read(port(SleepStatusPort), status)
	if status[0]&0x80 != 0 {
		t.Fatal("WAK_STS set: Linux would believe it woke up")
	}
}

func TestOtherSleepRequestsAreIgnored(t *testing.T) {
	d, r := newRecorded()
	for typ := byte(0); typ < 8; typ++ {
		if typ == SleepTypeS5 {
			d.Write(port(SleepControlPort), []byte{typ << 2}) // S5 without SLP_EN
			continue
		}
		d.Write(port(SleepControlPort), []byte{typ<<2 | 1<<5})
	}
	if r.powerOffs != 0 {
		t.Fatalf("%d power offs for requests that are not S5 with SLP_EN", r.powerOffs)
	}
}

func TestResetRegister(t *testing.T) {
	d, r := newRecorded()
	d.Write(port(ResetPort), []byte{ResetValue + 1})
	if r.resets != 0 {
		t.Fatal("a write of another value reset the VM")
	}
	d.Write(port(ResetPort), []byte{ResetValue})
	if r.resets != 1 || r.powerOffs != 0 {
		t.Fatalf("resets = %d, power offs = %d; want 1, 0", r.resets, r.powerOffs)
	}
}

func TestWideWritesUseTheLowByteAndBadOffsetsAreSafe(t *testing.T) {
	d, r := newRecorded()
	d.Write(port(SleepControlPort), []byte{SleepTypeS5<<2 | 1<<5, 0, 0, 0})
	d.Write(PortCount, []byte{ResetValue})
	d.Write(1<<40, []byte{ResetValue})
	d.Write(port(ResetPort), nil)
	if r.powerOffs != 1 || r.resets != 0 {
		t.Fatalf("power offs = %d, resets = %d; want 1, 0", r.powerOffs, r.resets)
	}
	b := []byte{0}
	d.Read(PortCount, b)
	if b[0] != 0xff {
		t.Fatalf("read past the registers = %#x, want 0xff", b[0])
	}
	if err := d.Restore(d.State()); err != nil {
		t.Fatal(err)
	}
}
