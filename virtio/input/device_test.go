package input_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/input"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const wait = 5 * time.Second

func start(t *testing.T, k input.Kind) (*input.Device, *vt.Driver) {
	t.Helper()
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	dev := input.New(k)
	d := vt.Init(t, virtio.NewMMIO(dev, mem, vt.NewIRQ()), mem, vt.Options{})
	t.Cleanup(d.Reset)
	if got := d.Read32(vt.RegDeviceID); got != 18 {
		t.Fatalf("device ID %d, want 18", got)
	}
	return dev, d
}

// query does what Linux's virtinput_cfg_select does: write select and
// subsel, read size and that many bytes of the union.
func query(d *vt.Driver, sel, subsel byte) []byte {
	d.WriteConfig(0, []byte{sel})
	d.WriteConfig(1, []byte{subsel})
	size := d.ReadConfig(2, 1)[0]
	b := make([]byte, size)
	for i := range b {
		b[i] = d.ReadConfig(8+uint64(i), 1)[0]
	}
	return b
}

func hasBit(b []byte, bit int) bool { return bit/8 < len(b) && b[bit/8]&(1<<(bit%8)) != 0 }

func TestKeyboardDescribesItself(t *testing.T) {
	_, d := start(t, input.Keyboard)
	if got := string(query(d, 0x01, 0)); got != "smol keyboard" {
		t.Fatalf("name %q", got)
	}
	ids := query(d, 0x03, 0)
	if len(ids) != 8 || binary.LittleEndian.Uint16(ids) != 0x06 {
		t.Fatalf("devids % x", ids)
	}
	keys := query(d, 0x11, input.EvKey)
	for _, k := range []int{1, 30, 28, 57, input.MaxKeyboardCode} { // Esc, A, Enter, Space, last
		if !hasBit(keys, k) {
			t.Errorf("key %d not offered", k)
		}
	}
	if hasBit(keys, 0) || hasBit(keys, input.BtnLeft) {
		t.Error("keyboard offers code 0 or a mouse button")
	}
	if len(query(d, 0x11, input.EvRep)) == 0 {
		t.Error("keyboard does not offer autorepeat")
	}
	if len(query(d, 0x11, input.EvAbs)) != 0 || len(query(d, 0x12, input.AbsX)) != 0 {
		t.Error("keyboard offers absolute axes")
	}
	if len(query(d, 0x77, 0)) != 0 {
		t.Error("unknown selector answered")
	}
}

func TestTabletDescribesItself(t *testing.T) {
	_, d := start(t, input.Tablet)
	buttons := query(d, 0x11, input.EvKey)
	for _, b := range []int{input.BtnLeft, input.BtnRight, input.BtnMiddle} {
		if !hasBit(buttons, b) {
			t.Errorf("button %#x not offered", b)
		}
	}
	if abs := query(d, 0x11, input.EvAbs); !hasBit(abs, input.AbsX) || !hasBit(abs, input.AbsY) {
		t.Errorf("abs bits % x", abs)
	}
	info := query(d, 0x12, input.AbsY)
	if len(info) != 20 || binary.LittleEndian.Uint32(info[0:]) != 0 || binary.LittleEndian.Uint32(info[4:]) != input.AbsMax {
		t.Fatalf("ABS_Y info % x", info)
	}
	if hasBit(query(d, 0x11, input.EvRel), input.RelWheel) == false {
		t.Error("no wheel")
	}
}

func TestEventsReachTheGuest(t *testing.T) {
	dev, d := start(t, input.Tablet)
	q := d.Queues[0]
	// Events sent before the guest posts buffers wait for them.
	if err := dev.Send(input.Event{Type: input.EvAbs, Code: input.AbsX, Value: 100}, input.Event{Type: input.EvKey, Code: input.BtnLeft, Value: 1}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		q.AddChain(nil, []uint32{8})
	}
	d.Notify(0)
	used := q.WaitUsed(3, wait)
	want := []input.Event{{input.EvAbs, input.AbsX, 100}, {input.EvKey, input.BtnLeft, 1}, {input.EvSyn, input.SynReport, 0}}
	for i, u := range used {
		got := input.Event{Type: binary.LittleEndian.Uint16(u.Data), Code: binary.LittleEndian.Uint16(u.Data[2:]), Value: int32(binary.LittleEndian.Uint32(u.Data[4:]))}
		if u.Len != 8 || got != want[i] {
			t.Fatalf("event %d: %+v (%d bytes), want %+v", i, got, u.Len, want[i])
		}
	}
	if c := dev.Counters(); c.Delivered != 3 {
		t.Fatalf("counters %+v", c)
	}
}

func TestBadEventsAndBacklog(t *testing.T) {
	dev, _ := start(t, input.Keyboard)
	for _, e := range []input.Event{
		{Type: input.EvAbs, Code: input.AbsX},
		{Type: input.EvKey, Code: 0},
		{Type: input.EvKey, Code: input.BtnLeft},
		{Type: input.EvRep},
		{Type: 0x1ff, Code: 1},
	} {
		if err := dev.Send(e); err == nil {
			t.Errorf("keyboard sent %+v", e)
		}
	}
	tab, _ := start(t, input.Tablet)
	if err := tab.Send(input.Event{Type: input.EvAbs, Code: input.AbsX, Value: input.AbsMax + 1}); err == nil {
		t.Error("tablet sent a position beyond its axis")
	}
	// No buffers posted: the backlog fills, then whole batches are refused.
	key := input.Event{Type: input.EvKey, Code: 30, Value: 1}
	n := 0
	for dev.Send(key) == nil {
		n++
		if n > input.MaxBacklog {
			t.Fatal("the backlog is unbounded")
		}
	}
	if n != input.MaxBacklog/2 {
		t.Fatalf("%d batches of 2 events fit, want %d", n, input.MaxBacklog/2)
	}
	if err := dev.Send(key); !errors.Is(err, input.ErrBacklog) {
		t.Fatalf("send to a full backlog: %v", err)
	}
	if c := dev.Counters(); c.Refused == 0 {
		t.Fatalf("counters %+v", c)
	}
}

func TestStatusQueueIsDrained(t *testing.T) {
	_, d := start(t, input.Keyboard)
	q := d.Queues[1]
	q.AddChain([][]byte{{0x11, 0, 0, 0, 1, 0, 0, 0}}, nil) // EV_LED LED_CAPSL on
	d.Notify(1)
	if u := q.WaitUsed(1, wait); u[0].Len != 0 {
		t.Fatalf("status completed with %d bytes", u[0].Len)
	}
}

func TestKeyCodes(t *testing.T) {
	// Pinned to include/uapi/linux/input-event-codes.h.
	for name, want := range map[string]uint16{
		"Escape": 1, "Digit1": 2, "Digit0": 11, "KeyQ": 16, "KeyP": 25, "KeyA": 30, "KeyL": 38,
		"KeyZ": 44, "KeyM": 50, "Enter": 28, "Space": 57, "F1": 59, "F9": 67, "F10": 68, "F12": 88,
		"ArrowLeft": 105, "MetaLeft": 125, "ShiftRight": 54,
	} {
		if got, ok := input.KeyCode(name); !ok || got != want {
			t.Errorf("%s: %d %v, want %d", name, got, ok, want)
		}
	}
	if _, ok := input.KeyCode("F:"); ok {
		t.Error("a key named F:")
	}
	if _, ok := input.KeyCode("NoSuchKey"); ok {
		t.Error("an unknown name has a code")
	}
	// Every code the map gives is one the keyboard offers.
	dev := input.New(input.Keyboard)
	for _, name := range []string{"KeyA", "ContextMenu", "Pause", "NumpadEnter"} {
		c, _ := input.KeyCode(name)
		if err := dev.Send(input.Event{Type: input.EvKey, Code: c, Value: 1}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
