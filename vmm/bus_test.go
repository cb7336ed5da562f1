package vmm

import "testing"

type recordingDevice struct {
	reads, writes []uint64
}

func (d *recordingDevice) Read(off uint64, data []byte) {
	d.reads = append(d.reads, off)
	for i := range data {
		data[i] = byte(off) + byte(i)
	}
}
func (d *recordingDevice) Write(off uint64, data []byte) { d.writes = append(d.writes, off) }

func TestBusDispatchesByRange(t *testing.T) {
	b := NewBus("pio")
	a, c := &recordingDevice{}, &recordingDevice{}
	if err := b.Register(0x3f8, 8, a); err != nil {
		t.Fatal(err)
	}
	if err := b.Register(0x60, 1, c); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1)
	if !b.Read(0x3fd, data) || data[0] != 5 {
		t.Fatalf("read 0x3fd = %v", data)
	}
	if !b.Write(0x60, data) || len(c.writes) != 1 || c.writes[0] != 0 {
		t.Fatalf("write 0x60: %v", c.writes)
	}
	if b.Read(0x3f7, data) || data[0] != 0xff {
		t.Fatalf("unclaimed read = %#x, want 0xff", data[0])
	}
	wide := make([]byte, 4)
	if b.Read(0x3fe, wide) {
		t.Fatal("a 4-byte read straddling the end of a device was dispatched")
	}
	if b.Write(^uint64(0), data) {
		t.Fatal("write at the top of the address space was dispatched")
	}
}

func TestBusRejectsOverlaps(t *testing.T) {
	b := NewBus("mmio")
	d := &recordingDevice{}
	if err := b.Register(0x1000, 0x1000, d); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]uint64{{0xfff, 2}, {0x1fff, 1}, {0x800, 0x2000}, {0, 0}, {^uint64(0), 2}} {
		if err := b.Register(r[0], r[1], d); err == nil {
			t.Errorf("Register(%#x, %#x) succeeded", r[0], r[1])
		}
	}
	if err := b.Register(0x2000, 1, d); err != nil {
		t.Errorf("adjacent range refused: %v", err)
	}
}
