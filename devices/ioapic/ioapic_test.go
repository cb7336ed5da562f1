package ioapic

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// recorder is a Router that keeps every table it was given.
type recorder struct {
	tables [][]Route
	fail   error
}

func (r *recorder) route(routes []Route) error {
	if r.fail != nil {
		return r.fail
	}
	r.tables = append(r.tables, routes)
	return nil
}

func (r *recorder) last() []Route {
	if len(r.tables) == 0 {
		return nil
	}
	return r.tables[len(r.tables)-1]
}

func write32(a *IOAPIC, offset uint64, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	a.Write(offset, b[:])
}

func read32(a *IOAPIC, offset uint64) uint32 {
	var b [4]byte
	a.Read(offset, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func writeReg(a *IOAPIC, index, v uint32) {
	write32(a, regSelectOffset, index)
	write32(a, regWindowOffset, v)
}

func readReg(a *IOAPIC, index uint32) uint32 {
	write32(a, regSelectOffset, index)
	return read32(a, regWindowOffset)
}

// program writes pin's entry the way Linux does: high half, then low.
func program(a *IOAPIC, pin int, entry uint64) {
	writeReg(a, regRedirFirst+2*uint32(pin)+1, uint32(entry>>32))
	writeReg(a, regRedirFirst+2*uint32(pin), uint32(entry))
}

func TestIdentityRegisters(t *testing.T) {
	a := New(3, (&recorder{}).route)
	if got := readReg(a, regVersion); got != 0x170011 {
		t.Errorf("version register = %#x, want 0x170011 (24 entries, version 0x11)", got)
	}
	if got := readReg(a, regID); got != 3<<24 {
		t.Errorf("ID register = %#x, want %#x", got, 3<<24)
	}
	writeReg(a, regID, 0xffff_ffff)
	if got := readReg(a, regID); got != 0x0f<<24 {
		t.Errorf("ID register after writing all ones = %#x, want only bits 24-27", got)
	}
	writeReg(a, regVersion, 0)
	if got := readReg(a, regVersion); got != 0x170011 {
		t.Errorf("the version register took a write: %#x", got)
	}
	if got := readReg(a, regArbitration); got != 0x0f<<24 {
		t.Errorf("arbitration register = %#x, want the ID", got)
	}
	if got := read32(a, regSelectOffset); got != regArbitration {
		t.Errorf("IOREGSEL reads %#x, want the last index written", got)
	}
}

func TestPinsStartMaskedAndRouteNothing(t *testing.T) {
	r := &recorder{}
	a := New(0, r.route)
	for pin := 0; pin < Pins; pin++ {
		if got := readReg(a, regRedirFirst+2*uint32(pin)); got != redirMasked {
			t.Fatalf("pin %d resets to %#x, want masked", pin, got)
		}
	}
	if len(r.tables) != 0 {
		t.Errorf("routes installed before the guest programmed a pin: %v", r.tables)
	}
}

func TestEntryBecomesMSI(t *testing.T) {
	r := &recorder{}
	a := New(0, r.route)
	// Pin 4: vector 0x24, fixed delivery, physical destination APIC 1, edge.
	program(a, 4, 1<<56|0x24)
	// Pin 5: vector 0x31, lowest priority, logical destination 0x3, level.
	program(a, 5, 3<<56|redirLevel|1<<11|1<<8|0x31)
	want := []Route{
		{Pin: 4, AddressLo: 0xFEE0_1000, Data: 0x24},
		{Pin: 5, AddressLo: 0xFEE0_3004, Data: 0xc131},
	}
	if got := r.last(); !reflect.DeepEqual(got, want) {
		t.Errorf("routes = %+v, want %+v", got, want)
	}
	// Masking pin 5 withdraws its route and leaves pin 4's.
	writeReg(a, regRedirFirst+10, redirMasked|redirLevel|1<<11|1<<8|0x31)
	if got := r.last(); !reflect.DeepEqual(got, want[:1]) {
		t.Errorf("after masking pin 5, routes = %+v, want %+v", got, want[:1])
	}
}

func TestUnroutableDeliveryModesRouteNowhere(t *testing.T) {
	r := &recorder{}
	a := New(0, r.route)
	program(a, 1, 0x21)      // fixed
	program(a, 2, 3<<8|0x22) // reserved
	program(a, 3, 6<<8|0x23) // reserved
	program(a, 4, 7<<8|0x24) // ExtINT: there is no 8259 to ask
	program(a, 5, 4<<8|0x25) // NMI
	var pins []uint32
	for _, route := range r.last() {
		pins = append(pins, route.Pin)
	}
	if !reflect.DeepEqual(pins, []uint32{1, 5}) {
		t.Errorf("routed pins %v, want [1 5]", pins)
	}
}

func TestUnchangedEntriesInstallNothing(t *testing.T) {
	r := &recorder{}
	a := New(0, r.route)
	program(a, 4, 0x24)
	n := len(r.tables)
	program(a, 4, 0x24)
	// The high half of a masked pin changes nothing KVM sees either.
	writeReg(a, regRedirFirst+2*7+1, 0xff00_0000)
	if len(r.tables) != n {
		t.Errorf("rewriting the same entries installed %d more tables", len(r.tables)-n)
	}
}

func TestReadOnlyBitsIgnoreWrites(t *testing.T) {
	a := New(0, (&recorder{}).route)
	writeReg(a, regRedirFirst, 0xffff_ffff)
	got := readReg(a, regRedirFirst)
	if got&redirReadOnly != 0 {
		t.Errorf("entry 0 low = %#x: delivery status or remote IRR took a write", got)
	}
	if got != 0xffff_ffff&^redirReadOnly {
		t.Errorf("entry 0 low = %#x, want every writable bit set", got)
	}
}

func TestBadAccessesAreHarmless(t *testing.T) {
	r := &recorder{}
	a := New(0, r.route)
	before := a.State()
	// Wrong widths, unknown offsets and registers past the table.
	a.Write(regWindowOffset, []byte{1})
	a.Write(regWindowOffset, make([]byte, 8))
	write32(a, 0x04, 0x10)
	write32(a, 0x1c, 0xdead_beef)
	writeReg(a, regRedirFirst+2*Pins, 0)
	writeReg(a, 0xff, 0)
	write32(a, regSelectOffset, 0xffff_ff10)
	if got := read32(a, regSelectOffset); got != regRedirFirst {
		t.Errorf("IOREGSEL = %#x, want only its low byte kept", got)
	}
	write32(a, regSelectOffset, before.Select)
	if got := a.State(); got != before {
		t.Errorf("state changed: %+v, want %+v", got, before)
	}
	for _, n := range []int{1, 2, 8} {
		b := make([]byte, n)
		for i := range b {
			b[i] = 0xaa
		}
		a.Read(regWindowOffset, b)
		for _, x := range b {
			if x != 0 {
				t.Errorf("%d-byte read = %x, want zeros", n, b)
				break
			}
		}
	}
	if got := readReg(a, 0x80); got != 0 {
		t.Errorf("unknown register reads %#x, want 0", got)
	}
}

func TestRouterFailureIsReported(t *testing.T) {
	r := &recorder{fail: errors.New("KVM_SET_GSI_ROUTING: no")}
	a := New(0, r.route)
	program(a, 4, 0x24)
	if err := a.Err(); err == nil {
		t.Fatal("Err() = nil after the router failed")
	}
	// It keeps trying: the next change is routed once the router works.
	r.fail = nil
	program(a, 5, 0x25)
	if got := len(r.last()); got != 2 {
		t.Errorf("after the router recovered, %d routes installed, want 2", got)
	}
}

func TestStateRoundTrip(t *testing.T) {
	r := &recorder{}
	a := New(0, r.route)
	program(a, 4, 1<<56|0x24)
	program(a, 9, 0x39)
	write32(a, regSelectOffset, regRedirFirst+8)
	saved := a.State()

	r2 := &recorder{}
	b := New(0, r2.route)
	if err := b.Restore(saved); err != nil {
		t.Fatal(err)
	}
	if got := b.State(); got != saved {
		t.Errorf("restored state %+v, want %+v", got, saved)
	}
	if !reflect.DeepEqual(r2.last(), r.last()) {
		t.Errorf("restore installed %+v, want the saved machine's %+v", r2.last(), r.last())
	}
	for _, bad := range []State{{ID: 1}, {Select: 0x100}} {
		if err := New(0, r2.route).Restore(bad); err == nil {
			t.Errorf("Restore(%+v) accepted a value the device cannot hold", bad)
		}
	}
}
