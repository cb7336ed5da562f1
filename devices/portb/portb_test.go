package portb

import "testing"

func TestReadsNoNMIReasonAndTimer2High(t *testing.T) {
	d := New()
	d.Write(0, []byte{0xff}) // a guest clearing NMI latches changes nothing
	b := []byte{0xaa}
	d.Read(0, b)
	if b[0]&0xc0 != 0 {
		t.Errorf("port 0x61 reads %#x: an NMI reason (bits 6-7) is set", b[0])
	}
	if b[0]&timer2Output == 0 {
		t.Errorf("port 0x61 reads %#x: timer 2's output is low, so a calibration loop waiting for it would spin", b[0])
	}
	wide := []byte{0xaa, 0xaa}
	d.Read(0, wide)
	if wide[1] != 0 {
		t.Errorf("a 2-byte read = %x, want the port and a zero", wide)
	}
}
