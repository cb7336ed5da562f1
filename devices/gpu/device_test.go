package gpu_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"testing"
	"time"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/virtio"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const wait = 5 * time.Second

// Wire values, written out here from the virtio spec (section 5.7.6.7)
// rather than taken from the package, so the tests pin the ABI.
const (
	getDisplayInfo  = 0x0100
	create2D        = 0x0101
	unref           = 0x0102
	setScanout      = 0x0103
	flush           = 0x0104
	transfer2D      = 0x0105
	attachBacking   = 0x0106
	detachBacking   = 0x0107
	getCapsetInfo   = 0x0108
	getEDID         = 0x010a
	ctxCreate       = 0x0200
	updateCursor    = 0x0300
	moveCursor      = 0x0301
	okNoData        = 0x1100
	okDisplayInfo   = 0x1101
	okEDID          = 0x1104
	errUnspec       = 0x1200
	errOutOfMemory  = 0x1201
	errScanoutID    = 0x1202
	errResourceID   = 0x1203
	errParameter    = 0x1205
	fmtB8G8R8X8     = 2
	fmtR8G8B8A8     = 67
	fmtX8R8G8B8     = 4
	fmtA8B8G8R8     = 121
	flagFence       = 1
	backingBase     = 4 << 20 // guest address of test backing pages
	guestMemorySize = 16 << 20
)

type rig struct {
	t   testing.TB
	dev *gpu.Device
	d   *vt.Driver
	mem *memory.Guest
}

func newRig(t testing.TB, cfg gpu.Config) *rig {
	t.Helper()
	mem, err := memory.New(guestMemorySize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	dev, err := gpu.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := virtio.NewMMIO(dev, mem, vt.NewIRQ())
	d := vt.Init(t, m, mem, vt.Options{})
	t.Cleanup(d.Reset)
	if got := d.Read32(vt.RegDeviceID); got != 16 {
		t.Fatalf("device ID %d, want 16", got)
	}
	return &rig{t: t, dev: dev, d: d, mem: mem}
}

// command builds a control command: the header (type, flags, fence) and
// then little-endian 32-bit fields.
func command(typ uint32, fields ...uint32) []byte {
	b := make([]byte, 24, 24+4*len(fields))
	binary.LittleEndian.PutUint32(b, typ)
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint32(b, f)
	}
	return b
}

// send posts cmd with room for a response of respLen bytes and returns
// the response.
func (r *rig) send(cmd []byte, respLen uint32) []byte {
	r.t.Helper()
	q := r.d.Queues[0]
	q.AddChain([][]byte{cmd}, []uint32{respLen})
	r.d.Notify(0)
	u := q.WaitUsed(1, wait)
	return u[0].Data
}

// status sends cmd and returns the response type.
func (r *rig) status(cmd []byte) uint32 {
	r.t.Helper()
	resp := r.send(cmd, 24)
	if len(resp) != 24 {
		r.t.Fatalf("command %#x: %d response bytes, want 24", binary.LittleEndian.Uint32(cmd), len(resp))
	}
	return binary.LittleEndian.Uint32(resp)
}

func (r *rig) want(cmd []byte, typ uint32) {
	r.t.Helper()
	if got := r.status(cmd); got != typ {
		r.t.Fatalf("command %#x %v: response %#x, want %#x", binary.LittleEndian.Uint32(cmd), cmd[24:], got, typ)
	}
}

// entry is one backing entry (guest address and length).
type entry struct {
	addr uint64
	len  uint32
}

func attach(id uint32, entries ...entry) []byte {
	b := command(attachBacking, id, uint32(len(entries)))
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint64(b, e.addr)
		b = binary.LittleEndian.AppendUint32(b, e.len)
		b = binary.LittleEndian.AppendUint32(b, 0)
	}
	return b
}

func transfer(id uint32, rect image.Rectangle, offset uint64) []byte {
	return command(transfer2D, uint32(rect.Min.X), uint32(rect.Min.Y), uint32(rect.Dx()), uint32(rect.Dy()),
		uint32(offset), uint32(offset>>32), id, 0)
}

// guestWrite fills guest memory at addr.
func (r *rig) guestWrite(addr uint64, data []byte) {
	r.t.Helper()
	b, err := r.mem.Slice(addr, uint64(len(data)))
	if err != nil {
		r.t.Fatal(err)
	}
	copy(b, data)
}

// pattern is a w x h picture in B8G8R8X8 bytes whose every pixel differs
// from its neighbours, with the RGBA image it must show as.
func pattern(w, h int, seed byte) ([]byte, *image.RGBA) {
	raw := make([]byte, w*h*4)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{R: byte(x*7) + seed, G: byte(y*13) ^ seed, B: byte(x + y*3), A: 0xff}
			p := raw[(y*w+x)*4:]
			p[0], p[1], p[2], p[3] = c.B, c.G, c.R, 0x5a // X is ignored
			img.SetRGBA(x, y, c)
		}
	}
	return raw, img
}

// scatter writes data into guest memory as the pieces a driver's
// scatter-gather list would have: sizes as given, each piece at its own
// address with gaps between them, in reverse address order (backing order
// is list order, not address order).
func (r *rig) scatter(data []byte, sizes ...uint32) []entry {
	r.t.Helper()
	var entries []entry
	addr := uint64(backingBase + 4<<20)
	off := uint32(0)
	for _, s := range sizes {
		addr -= uint64(s) + 4096
		r.guestWrite(addr, data[off:off+s])
		entries = append(entries, entry{addr, s})
		off += s
	}
	if int(off) != len(data) {
		r.t.Fatalf("sizes cover %d of %d bytes", off, len(data))
	}
	return entries
}

func TestDisplayInfoAndEDID(t *testing.T) {
	r := newRig(t, gpu.Config{Width: 1024, Height: 768})
	if f := r.d.Features; f&(1<<1) == 0 || f&1 != 0 {
		t.Fatalf("features %#x: want EDID, not VIRGL", f)
	}
	if n := binary.LittleEndian.Uint32(r.d.ReadConfig(8, 4)); n != 1 {
		t.Fatalf("num_scanouts %d", n)
	}
	resp := r.send(command(getDisplayInfo), 408)
	if len(resp) != 408 || binary.LittleEndian.Uint32(resp) != okDisplayInfo {
		t.Fatalf("display info: %d bytes, type %#x", len(resp), binary.LittleEndian.Uint32(resp))
	}
	mode := resp[24:]
	if w, h, en := binary.LittleEndian.Uint32(mode[8:]), binary.LittleEndian.Uint32(mode[12:]), binary.LittleEndian.Uint32(mode[16:]); w != 1024 || h != 768 || en != 1 {
		t.Fatalf("scanout 0: %dx%d enabled %d", w, h, en)
	}
	if !bytes.Equal(resp[48:], make([]byte, 408-48)) {
		t.Fatal("scanouts 1-15 are not all zero")
	}

	resp = r.send(command(getEDID, 0, 0), 24+8+1024)
	if binary.LittleEndian.Uint32(resp) != okEDID || binary.LittleEndian.Uint32(resp[24:]) != 128 {
		t.Fatalf("EDID: type %#x size %d", binary.LittleEndian.Uint32(resp), binary.LittleEndian.Uint32(resp[24:]))
	}
	e := resp[32 : 32+128]
	if !bytes.Equal(e[:8], []byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0}) {
		t.Fatalf("EDID header % x", e[:8])
	}
	sum := byte(0)
	for _, v := range e {
		sum += v
	}
	if sum != 0 {
		t.Fatalf("EDID checksum off by %d", sum)
	}
	dtd := e[54:72]
	hActive := int(dtd[2]) | int(dtd[4]>>4)<<8
	vActive := int(dtd[5]) | int(dtd[7]>>4)<<8
	if hActive != 1024 || vActive != 768 {
		t.Fatalf("EDID preferred mode %dx%d", hActive, vActive)
	}
	r.want(command(getEDID, 1, 0), errScanoutID)
}

func TestEDIDLargestSize(t *testing.T) {
	r := newRig(t, gpu.Config{Width: gpu.MaxWidth, Height: gpu.MaxHeight})
	resp := r.send(command(getEDID, 0, 0), 24+8+1024)
	dtd := resp[32+54:]
	clock := int(dtd[0]) | int(dtd[1])<<8
	hActive := int(dtd[2]) | int(dtd[4]>>4)<<8
	vActive := int(dtd[5]) | int(dtd[7]>>4)<<8
	if hActive != gpu.MaxWidth || vActive != gpu.MaxHeight || clock == 0 {
		t.Fatalf("EDID mode %dx%d clock %d", hActive, vActive, clock)
	}
}

func TestDrawTransferFlushScreenshot(t *testing.T) {
	r := newRig(t, gpu.Config{})
	const w, h = 64, 40
	if _, err := r.dev.Screenshot(); !errors.Is(err, gpu.ErrNoScanout) {
		t.Fatalf("screenshot before a mode: %v", err)
	}
	raw, want := pattern(w, h, 1)
	r.want(command(create2D, 7, fmtB8G8R8X8, w, h), okNoData)
	// Pieces that split rows and pixels.
	r.want(attach(7, r.scatter(raw, 1000, 4096, 3, 5141)...), okNoData)
	r.want(transfer(7, image.Rect(0, 0, w, h), 0), okNoData)
	frame := r.dev.Frame()
	r.want(command(setScanout, 0, 0, w, h, 0, 7), okNoData)
	r.want(command(flush, 0, 0, w, h, 7, 0), okNoData)
	if r.dev.Frame() < frame+2 {
		t.Fatalf("frame %d after a scanout change and a flush, was %d", r.dev.Frame(), frame)
	}
	got, err := r.dev.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if got.Bounds() != want.Bounds() || !bytes.Equal(got.Pix, want.Pix) {
		t.Fatal("screenshot differs from the pattern")
	}

	// A sub-rectangle transfer changes that rectangle only: the backing
	// changes everywhere, the host copy where told.
	raw2, want2 := pattern(w, h, 99)
	r.want(command(detachBacking, 7, 0), okNoData)
	r.want(attach(7, r.scatter(raw2, uint32(len(raw2)))...), okNoData)
	sub := image.Rect(5, 3, 30, 17)
	r.want(transfer(7, sub, uint64(3*w*4+5*4)), okNoData)
	got, _ = r.dev.Screenshot()
	for y := range h {
		for x := range w {
			exp := want.RGBAAt(x, y)
			if image.Pt(x, y).In(sub) {
				exp = want2.RGBAAt(x, y)
			}
			if got.RGBAAt(x, y) != exp {
				t.Fatalf("pixel %d,%d is %v, want %v", x, y, got.RGBAAt(x, y), exp)
			}
		}
	}

	// A scanout showing part of the resource.
	r.want(command(setScanout, 8, 4, 16, 10, 0, 7), okNoData)
	got, _ = r.dev.Screenshot()
	if got.Bounds().Dx() != 16 || got.Bounds().Dy() != 10 || got.RGBAAt(0, 0) != want2.RGBAAt(8, 4) && got.RGBAAt(0, 0) != want.RGBAAt(8, 4) {
		t.Fatalf("partial scanout: %v, first pixel %v", got.Bounds(), got.RGBAAt(0, 0))
	}

	// Turning the display off, and unref of the resource on it.
	r.want(command(setScanout, 0, 0, 0, 0, 0, 0), okNoData)
	if _, err := r.dev.Screenshot(); !errors.Is(err, gpu.ErrNoScanout) {
		t.Fatalf("screenshot with the display off: %v", err)
	}
	r.want(command(setScanout, 0, 0, w, h, 0, 7), okNoData)
	r.want(command(unref, 7, 0), okNoData)
	if _, err := r.dev.Screenshot(); !errors.Is(err, gpu.ErrNoScanout) {
		t.Fatalf("screenshot after unref: %v", err)
	}
	r.want(command(flush, 0, 0, w, h, 7, 0), errResourceID)
}

func TestFormats(t *testing.T) {
	r := newRig(t, gpu.Config{})
	// One pixel with bytes 0x11 0x22 0x33 0x44 in memory order.
	px := []byte{0x11, 0x22, 0x33, 0x44}
	for _, c := range []struct {
		format  uint32
		r, g, b byte
	}{
		{fmtB8G8R8X8, 0x33, 0x22, 0x11},
		{fmtX8R8G8B8, 0x22, 0x33, 0x44},
		{fmtR8G8B8A8, 0x11, 0x22, 0x33},
		{fmtA8B8G8R8, 0x44, 0x33, 0x22},
	} {
		id := c.format + 100
		r.want(command(create2D, id, c.format, 1, 1), okNoData)
		r.guestWrite(backingBase, px)
		r.want(attach(id, entry{backingBase, 4}), okNoData)
		r.want(transfer(id, image.Rect(0, 0, 1, 1), 0), okNoData)
		r.want(command(setScanout, 0, 0, 1, 1, 0, id), okNoData)
		img, err := r.dev.Screenshot()
		if err != nil {
			t.Fatal(err)
		}
		if got := img.RGBAAt(0, 0); got != (color.RGBA{c.r, c.g, c.b, 0xff}) {
			t.Errorf("format %d: %v, want %02x %02x %02x", c.format, got, c.r, c.g, c.b)
		}
	}
	r.want(command(create2D, 1, 5, 1, 1), errParameter) // not a 2D format
}

func TestResourceLimits(t *testing.T) {
	r := newRig(t, gpu.Config{Limits: gpu.Limits{MaxResources: 3, MaxHostBytes: 1 << 20, MaxBackingEntries: 4}})
	r.want(command(create2D, 0, fmtB8G8R8X8, 8, 8), errResourceID)
	r.want(command(create2D, 1, fmtB8G8R8X8, 0, 8), errParameter)
	r.want(command(create2D, 1, fmtB8G8R8X8, 0xffffffff, 0xffffffff), errOutOfMemory)
	r.want(command(create2D, 1, fmtB8G8R8X8, 16384, 16384), errOutOfMemory)
	r.want(command(create2D, 1, fmtB8G8R8X8, 512, 256), okNoData)  // 512 KiB
	r.want(command(create2D, 1, fmtB8G8R8X8, 8, 8), errResourceID) // taken
	r.want(command(create2D, 2, fmtB8G8R8X8, 512, 257), errOutOfMemory)
	r.want(command(create2D, 2, fmtB8G8R8X8, 8, 8), okNoData)
	r.want(command(create2D, 3, fmtB8G8R8X8, 8, 8), okNoData)
	r.want(command(create2D, 4, fmtB8G8R8X8, 8, 8), errOutOfMemory) // count
	r.want(command(unref, 1, 0), okNoData)
	r.want(command(unref, 1, 0), errResourceID)
	r.want(command(create2D, 4, fmtB8G8R8X8, 512, 255), okNoData) // bytes came back

	// Backing lists beyond the entry limit, or claiming more entries
	// than the command carries.
	five := make([]entry, 5)
	for i := range five {
		five[i] = entry{backingBase + uint64(i)*4096, 64}
	}
	r.want(attach(2, five...), errOutOfMemory)
	short := attach(2, five[:2]...)
	binary.LittleEndian.PutUint32(short[28:], 3)
	r.want(short, errUnspec)
	huge := attach(2, five[:1]...)
	binary.LittleEndian.PutUint32(huge[28:], 0xffffffff)
	r.want(huge, errOutOfMemory)

	if s := r.dev.Stats(); s.Errors == 0 || s.Commands < 15 {
		t.Fatalf("stats %+v", s)
	}
}

func TestHostileBacking(t *testing.T) {
	r := newRig(t, gpu.Config{})
	r.want(command(create2D, 1, fmtB8G8R8X8, 16, 16), okNoData) // 1 KiB
	for name, entries := range map[string][]entry{
		"beyond RAM":        {{guestMemorySize - 512, 1024}},
		"far beyond RAM":    {{1 << 62, 1024}},
		"wrapping":          {{^uint64(0) - 100, 1024}},
		"empty entry":       {{backingBase, 512}, {backingBase + 4096, 0}},
		"overlapping":       {{backingBase, 600}, {backingBase + 512, 600}},
		"duplicated":        {{backingBase, 512}, {backingBase, 512}},
		"nested":            {{backingBase, 4096}, {backingBase + 100, 100}},
		"no entries at all": nil,
	} {
		if got := r.status(attach(1, entries...)); got != errParameter {
			t.Errorf("%s: response %#x, want %#x", name, got, errParameter)
		}
		// Nothing was attached.
		if got := r.status(transfer(1, image.Rect(0, 0, 1, 1), 0)); got != errUnspec {
			t.Errorf("%s: transfer after a refused attach: %#x", name, got)
		}
	}
	r.want(attach(99, entry{backingBase, 1024}), errResourceID)
	r.want(command(detachBacking, 1, 0), errUnspec)

	// Adjacent entries are fine; a second attach is not.
	r.want(attach(1, entry{backingBase, 512}, entry{backingBase + 512, 512}), okNoData)
	r.want(attach(1, entry{backingBase + 8192, 1024}), errUnspec)

	// Transfers outside the resource or the backing.
	for name, cmd := range map[string][]byte{
		"rect beyond width":  transfer(1, image.Rect(10, 0, 17, 1), 0),
		"rect beyond height": transfer(1, image.Rect(0, 15, 1, 17), 0),
		"x+width wraps":      command(transfer2D, 0xffffffff, 0, 2, 1, 0, 0, 1, 0),
		"y+height wraps":     command(transfer2D, 0, 0xfffffff0, 1, 0x20, 0, 0, 1, 0),
		"offset beyond":      transfer(1, image.Rect(0, 0, 1, 1), 1024),
		"offset huge":        transfer(1, image.Rect(0, 0, 1, 1), 1<<63),
		"offset max":         transfer(1, image.Rect(0, 0, 1, 1), ^uint64(0)),
		"last row past end":  transfer(1, image.Rect(0, 0, 16, 16), 4),
	} {
		if got := r.status(cmd); got != errParameter {
			t.Errorf("%s: response %#x, want %#x", name, got, errParameter)
		}
	}
	r.want(transfer(1, image.Rect(0, 0, 16, 16), 0), okNoData)
	r.want(transfer(1, image.Rect(15, 15, 16, 16), 1020), okNoData)
	r.want(transfer(1, image.Rect(3, 3, 3, 3), 0), okNoData) // empty
	r.want(transfer(2, image.Rect(0, 0, 1, 1), 0), errResourceID)
}

func TestScanoutChecks(t *testing.T) {
	r := newRig(t, gpu.Config{})
	r.want(command(create2D, 1, fmtB8G8R8X8, 16, 16), okNoData)
	r.want(command(setScanout, 0, 0, 16, 16, 1, 1), errScanoutID)
	r.want(command(setScanout, 0, 0, 16, 16, 0xffffffff, 1), errScanoutID)
	r.want(command(setScanout, 0, 0, 16, 16, 0, 2), errResourceID)
	r.want(command(setScanout, 0, 0, 17, 16, 0, 1), errParameter)
	r.want(command(setScanout, 8, 8, 0xfffffffc, 4, 0, 1), errParameter)
	r.want(command(setScanout, 0, 0, 0, 16, 0, 1), errParameter)
	r.want(command(flush, 0, 0, 32, 32, 1, 0), errParameter)
	if _, err := r.dev.Screenshot(); !errors.Is(err, gpu.ErrNoScanout) {
		t.Fatalf("a refused scanout shows something: %v", err)
	}
}

func TestFencesUnknownAndShortCommands(t *testing.T) {
	r := newRig(t, gpu.Config{})
	cmd := command(create2D, 1, fmtB8G8R8X8, 4, 4)
	binary.LittleEndian.PutUint32(cmd[4:], flagFence)
	binary.LittleEndian.PutUint64(cmd[8:], 0x1122334455667788)
	binary.LittleEndian.PutUint32(cmd[16:], 5)
	resp := r.send(cmd, 24)
	if binary.LittleEndian.Uint32(resp) != okNoData || binary.LittleEndian.Uint32(resp[4:])&flagFence == 0 ||
		binary.LittleEndian.Uint64(resp[8:]) != 0x1122334455667788 || binary.LittleEndian.Uint32(resp[16:]) != 5 {
		t.Fatalf("fenced response % x", resp)
	}
	if resp := r.send(command(getDisplayInfo), 24); len(resp) != 0 {
		t.Fatalf("a response that does not fit was written: %d bytes", len(resp))
	}
	r.want(command(ctxCreate, 0, 0), errUnspec)
	r.want(command(getCapsetInfo, 0, 0), errParameter)
	r.want(command(0xdead), errUnspec)
	r.want(command(create2D, 2, fmtB8G8R8X8), errUnspec) // short
	r.want(command(transfer2D, 0, 0, 1, 1), errUnspec)
	if got := binary.LittleEndian.Uint32(r.send([]byte{1, 2, 3}, 24)); got != errUnspec {
		t.Fatalf("3-byte command: %#x", got)
	}
	// A chain without a readable part is answered too.
	q := r.d.Queues[0]
	q.AddChain(nil, []uint32{24})
	r.d.Notify(0)
	if u := q.WaitUsed(1, wait); binary.LittleEndian.Uint32(u[0].Data) != errUnspec {
		t.Fatalf("empty command: % x", u[0].Data)
	}
}

func TestCursor(t *testing.T) {
	r := newRig(t, gpu.Config{})
	r.want(command(create2D, 9, fmtB8G8R8X8, 64, 64), okNoData)
	cursor := func(typ, x, y, res, hotX, hotY uint32) {
		t.Helper()
		q := r.d.Queues[1]
		q.AddChain([][]byte{command(typ, 0, x, y, 0, res, hotX, hotY, 0)}, nil)
		r.d.Notify(1)
		if u := q.WaitUsed(1, wait); u[0].Len != 0 {
			t.Fatalf("cursor queue answered %d bytes", u[0].Len)
		}
	}
	if c := r.dev.Cursor(); c.Visible {
		t.Fatal("cursor visible before any update")
	}
	cursor(updateCursor, 10, 20, 9, 1, 2)
	if c := r.dev.Cursor(); !c.Visible || c.X != 10 || c.Y != 20 || c.HotX != 1 || c.HotY != 2 {
		t.Fatalf("after update: %+v", c)
	}
	cursor(moveCursor, 300, 400, 0, 0, 0)
	if c := r.dev.Cursor(); !c.Visible || c.X != 300 || c.Y != 400 || c.Updates != 2 {
		t.Fatalf("after move: %+v", c)
	}
	cursor(updateCursor, 1, 1, 12345, 0, 0) // no such resource: dropped
	if c := r.dev.Cursor(); c.X != 300 || c.Updates != 2 {
		t.Fatalf("after a bad update: %+v", c)
	}
	cursor(updateCursor, 5, 5, 0, 0, 0)
	if c := r.dev.Cursor(); c.Visible {
		t.Fatalf("cursor visible after resource 0: %+v", c)
	}
}

func TestResetForgetsResources(t *testing.T) {
	r := newRig(t, gpu.Config{})
	r.want(command(create2D, 1, fmtB8G8R8X8, 4, 4), okNoData)
	r.want(command(setScanout, 0, 0, 4, 4, 0, 1), okNoData)
	r.d.Reset()
	if _, err := r.dev.Screenshot(); !errors.Is(err, gpu.ErrNoScanout) {
		t.Fatalf("screenshot after reset: %v", err)
	}
	r2 := &rig{t: t, dev: r.dev, mem: r.mem, d: vt.Init(t, r.d.Transport, r.mem, vt.Options{})}
	r2.want(command(create2D, 1, fmtB8G8R8X8, 4, 4), okNoData) // the ID is free again
}

func TestConfigChecks(t *testing.T) {
	for _, c := range []gpu.Config{{Width: 100, Height: 800}, {Width: 1280, Height: 0}, {Width: 5000, Height: 800}, {Width: 1280, Height: 3000}} {
		if _, err := gpu.New(c); err == nil {
			t.Errorf("New(%dx%d) succeeded", c.Width, c.Height)
		}
	}
	d, err := gpu.New(gpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if w, h := d.Size(); w != 1280 || h != 800 {
		t.Fatalf("default size %dx%d", w, h)
	}
}

func TestWaitFrame(t *testing.T) {
	r := newRig(t, gpu.Config{})
	r.want(command(create2D, 1, fmtB8G8R8X8, 4, 4), okNoData)
	r.want(command(setScanout, 0, 0, 4, 4, 0, 1), okNoData)
	now := r.dev.Frame()
	got := make(chan uint64)
	go func() {
		f, _ := r.dev.WaitFrame(context.Background(), now)
		got <- f
	}()
	select {
	case f := <-got:
		t.Fatalf("WaitFrame returned %d before a flush", f)
	case <-time.After(50 * time.Millisecond):
	}
	r.want(command(flush, 0, 0, 4, 4, 1, 0), okNoData)
	select {
	case f := <-got:
		if f <= now {
			t.Fatalf("frame %d, was %d", f, now)
		}
	case <-time.After(wait):
		t.Fatal("WaitFrame did not return after a flush")
	}
	// A flush of a resource not on the display is not a frame.
	r.want(command(create2D, 2, fmtB8G8R8X8, 4, 4), okNoData)
	before := r.dev.Frame()
	r.want(command(flush, 0, 0, 4, 4, 2, 0), okNoData)
	if r.dev.Frame() != before {
		t.Fatal("a flush off the display counted as a frame")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.dev.WaitFrame(ctx, r.dev.Frame()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFrame with nothing new: %v", err)
	}
}

// BenchmarkScreenshot is what `smol machine screenshot` costs the VMM for
// a full 1280x800 screen: the conversion to RGBA and the PNG encoding.
func BenchmarkScreenshot(b *testing.B) {
	r := newRig(b, gpu.Config{})
	d := r.dev
	raw, _ := pattern(1280, 800, 3)
	r.guestWrite(backingBase, raw)
	r.want(command(create2D, 1, fmtB8G8R8X8, 1280, 800), okNoData)
	r.want(attach(1, entry{backingBase, uint32(len(raw))}), okNoData)
	r.want(transfer(1, image.Rect(0, 0, 1280, 800), 0), okNoData)
	r.want(command(setScanout, 0, 0, 1280, 800, 0, 1), okNoData)
	b.ResetTimer()
	for range b.N {
		img, err := d.Screenshot()
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if err := gpu.EncodePNG(&buf, img); err != nil {
			b.Fatal(err)
		}
	}
}
