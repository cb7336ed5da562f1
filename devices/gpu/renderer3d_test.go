package gpu_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/virtio"
)

// More wire values (virtio 1.2, section 5.7.6.7).
const (
	ctxDestroy    = 0x0201
	ctxAttach     = 0x0202
	create3D      = 0x0204
	toHost3D      = 0x0205
	submit3D      = 0x0207
	okCapsetInfo  = 0x1102
	featureVirgl  = 1 << 0
	configCapsets = 12
)

// fakeRenderer records what the device forwards and answers OK (a capset
// info with a recognisable body), or fails every call once broken.
type fakeRenderer struct {
	mu       sync.Mutex
	commands [][]byte
	attached map[uint32][]virtio.Buffer
	broken   bool
	closed   bool
	reads    [][5]uint32 // ReadScanout calls: resource, x, y, width, height
}

func (f *fakeRenderer) Capsets() []uint32 { return []uint32{1, 2} }

func (f *fakeRenderer) Command(cmd []byte) (uint32, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken {
		return 0, nil, errors.New("renderer gone")
	}
	f.commands = append(f.commands, append([]byte(nil), cmd...))
	if binary.LittleEndian.Uint32(cmd) == getCapsetInfo {
		return okCapsetInfo, []byte{1, 0, 0, 0, 2, 0, 0, 0, 0x34, 1, 0, 0, 0, 0, 0, 0}, nil
	}
	return okNoData, nil, nil
}

func (f *fakeRenderer) AttachBacking(id uint32, entries []virtio.Buffer) (uint32, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken {
		return 0, nil, errors.New("renderer gone")
	}
	if f.attached == nil {
		f.attached = map[uint32][]virtio.Buffer{}
	}
	f.attached[id] = entries
	return okNoData, nil, nil
}

// ReadScanout answers with B8G8R8X8 pixels that say where they came
// from: blue = x, green = y of the resource, red = 0x80.
func (f *fakeRenderer) ReadScanout(id, x, y, w, h uint32) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken {
		return nil, errors.New("renderer gone")
	}
	f.reads = append(f.reads, [5]uint32{id, x, y, w, h})
	px := make([]byte, 0, w*h*4)
	for j := range h {
		for i := range w {
			px = append(px, byte(x+i), byte(y+j), 0x80, 0)
		}
	}
	return px, nil
}

func (f *fakeRenderer) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// backing returns the backing the renderer got for resource id.
func (f *fakeRenderer) backing(id uint32) []virtio.Buffer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attached[id]
}

// types returns the command types forwarded so far.
func (f *fakeRenderer) types() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []uint32
	for _, c := range f.commands {
		out = append(out, binary.LittleEndian.Uint32(c))
	}
	return out
}

func newRig3D(t *testing.T, limits gpu.Limits) (*rig, *fakeRenderer) {
	f := &fakeRenderer{}
	return newRig(t, gpu.Config{Renderer: f, Limits: limits}), f
}

func resource3D(id uint32) []byte {
	// target 2D texture, RGBA8, render target + sampler view, 64x64
	return command(create3D, id, 2, fmtR8G8B8A8, 1<<1|1<<3, 64, 64, 1, 1, 0, 0, 0, 0)
}

func TestRendererOffersVirglAndCapsets(t *testing.T) {
	r, _ := newRig3D(t, gpu.Limits{})
	if f := r.d.Features; f&featureVirgl == 0 {
		t.Fatalf("features %#x: want VIRGL with a renderer", f)
	}
	if n := binary.LittleEndian.Uint32(r.d.ReadConfig(configCapsets, 4)); n != 2 {
		t.Fatalf("num_capsets %d, want the renderer's 2", n)
	}
	// A fenced command's response carries the fence, and the renderer's
	// body follows the header.
	cmd := command(getCapsetInfo, 0, 0)
	binary.LittleEndian.PutUint32(cmd[4:], flagFence)
	binary.LittleEndian.PutUint64(cmd[8:], 0xfe11ce)
	resp := r.send(cmd, 40)
	if len(resp) != 40 || binary.LittleEndian.Uint32(resp) != okCapsetInfo {
		t.Fatalf("capset info: %d bytes, type %#x", len(resp), binary.LittleEndian.Uint32(resp))
	}
	if binary.LittleEndian.Uint32(resp[4:])&flagFence == 0 || binary.LittleEndian.Uint64(resp[8:]) != 0xfe11ce {
		t.Fatalf("response header %x: want the fence echoed", resp[:24])
	}
	if resp[32] != 0x34 {
		t.Fatalf("response body %x: want the renderer's", resp[24:])
	}
}

// Resource IDs are one namespace: a 3D resource cannot take a 2D one's ID
// or the reverse, ID 0 names nothing, and neither reaches the renderer.
func TestRendererResourceIDs(t *testing.T) {
	r, f := newRig3D(t, gpu.Limits{})
	r.want(command(create2D, 1, fmtB8G8R8X8, 16, 16), okNoData)
	r.want(resource3D(1), errResourceID)
	r.want(resource3D(0), errResourceID)
	r.want(resource3D(2), okNoData)
	r.want(command(create2D, 2, fmtB8G8R8X8, 16, 16), errResourceID)
	r.want(resource3D(2), errResourceID)
	if got := f.types(); len(got) != 1 || got[0] != create3D {
		t.Fatalf("forwarded %#x, want one CREATE_3D", got)
	}
	// UNREF of the 3D resource goes to the renderer; of the 2D one, not.
	r.want(command(unref, 2, 0), okNoData)
	r.want(command(unref, 1, 0), okNoData)
	if got := f.types(); len(got) != 2 || got[1] != unref {
		t.Fatalf("forwarded %#x, want CREATE_3D then UNREF", got)
	}
	// The ID is free again, for either kind.
	r.want(command(create2D, 2, fmtB8G8R8X8, 16, 16), okNoData)
}

// 3D resources count against MaxResources with the 2D ones.
func TestRendererResourceLimit(t *testing.T) {
	r, _ := newRig3D(t, gpu.Limits{MaxResources: 2, MaxHostBytes: 1 << 20, MaxBackingEntries: 4})
	r.want(command(create2D, 1, fmtB8G8R8X8, 16, 16), okNoData)
	r.want(resource3D(2), okNoData)
	r.want(resource3D(3), errOutOfMemory)
}

// A 3D resource's backing is checked like a 2D one's before the renderer
// sees it: entries in guest RAM, none empty, none overlapping, not too
// many.
func TestRendererBackingIsChecked(t *testing.T) {
	r, f := newRig3D(t, gpu.Limits{MaxResources: 8, MaxHostBytes: 1 << 20, MaxBackingEntries: 4})
	r.want(resource3D(7), okNoData)
	bad := map[string][]byte{
		"past the end of RAM": attach(7, entry{guestMemorySize - 4096, 8192}),
		"empty entry":         attach(7, entry{backingBase, 0}),
		"overlapping":         attach(7, entry{backingBase, 8192}, entry{backingBase + 4096, 4096}),
		"wrapping address":    attach(7, entry{^uint64(0) - 100, 4096}),
	}
	for name, cmd := range bad {
		if got := r.status(cmd); got != errParameter {
			t.Errorf("%s: response %#x, want %#x", name, got, errParameter)
		}
	}
	r.want(attach(7, entry{backingBase, 4096}, entry{backingBase + 4096, 4096}, entry{backingBase + 8192, 4096},
		entry{backingBase + 12288, 4096}, entry{backingBase + 16384, 4096}), errOutOfMemory)
	if n := len(f.backing(7)); n != 0 {
		t.Fatalf("the renderer got a backing of %d entries, want none", n)
	}
	r.want(attach(7, entry{backingBase + 8192, 4096}, entry{backingBase, 4096}), okNoData)
	if got := f.backing(7); len(got) != 2 || got[0].Addr != backingBase+8192 {
		t.Fatalf("renderer's backing %+v: want the list as the guest gave it", got)
	}
}

// A SUBMIT_3D whose size field runs past the command is refused.
func TestRendererSubmitSize(t *testing.T) {
	r, f := newRig3D(t, gpu.Limits{})
	r.want(append(command(submit3D, 64, 0), make([]byte, 16)...), errParameter)
	r.want(append(command(submit3D, 16, 0), make([]byte, 16)...), okNoData)
	if got := f.types(); len(got) != 1 {
		t.Fatalf("forwarded %#x, want only the well-formed submit", got)
	}
}

// A renderer that fails breaks 3D only: every 3D command is answered with
// an error, and the display's own commands still work.
func TestRendererFailureBreaksOnly3D(t *testing.T) {
	r, f := newRig3D(t, gpu.Limits{})
	r.want(resource3D(3), okNoData)
	f.mu.Lock()
	f.broken = true
	f.mu.Unlock()
	r.want(resource3D(4), errUnspec)
	r.want(command(toHost3D, 0, 0, 0, 64, 64, 1, 0, 0, 3, 0, 256, 0), errUnspec)
	r.want(command(create2D, 5, fmtB8G8R8X8, 16, 16), okNoData)
	if resp := r.send(command(getDisplayInfo), 408); binary.LittleEndian.Uint32(resp) != okDisplayInfo {
		t.Fatalf("display info after the renderer failed: %#x", binary.LittleEndian.Uint32(resp))
	}
}

// A device reset drops the guest's 3D resources and contexts in the
// renderer; closing the device closes the renderer.
func TestRendererResetAndClose(t *testing.T) {
	r, f := newRig3D(t, gpu.Limits{})
	ctx := append(command(ctxCreate, 4, 0), make([]byte, 64)...)
	binary.LittleEndian.PutUint32(ctx[16:], 9) // context 9
	r.want(ctx, okNoData)
	r.want(resource3D(3), okNoData)
	r.want(command(ctxAttach, 3, 0), okNoData)
	r.dev.Reset()
	got := f.types()
	if len(got) != 5 || got[3] != unref || got[4] != ctxDestroy {
		t.Fatalf("forwarded %#x: want the reset to UNREF resource 3 and destroy context 9", got)
	}
	f.mu.Lock()
	id, c := binary.LittleEndian.Uint32(f.commands[3][24:]), binary.LittleEndian.Uint32(f.commands[4][16:])
	f.mu.Unlock()
	if id != 3 || c != 9 {
		t.Fatalf("reset unref'd resource %d and destroyed context %d, want 3 and 9", id, c)
	}
	r.dev.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		t.Fatal("Close did not close the renderer")
	}
}

// A 3D resource on the scanout shows what the renderer reads back of the
// scanout's rectangle at each flush; before the first flush the display
// is black; bad rectangles and formats are refused; dropping the
// resource turns the display off.
func TestRenderer3DScanout(t *testing.T) {
	r, f := newRig3D(t, gpu.Limits{})
	// B8G8R8X8, 64x64, render target + scanout
	r.want(command(create3D, 4, 2, fmtB8G8R8X8, 1<<1|1<<18, 64, 64, 1, 1, 0, 0, 0, 0), okNoData)
	r.want(command(create3D, 5, 2, 999, 1<<1, 64, 64, 1, 1, 0, 0, 0, 0), okNoData) // a format no display shows
	r.want(command(setScanout, 60, 0, 8, 8, 0, 4), errParameter)                   // past the edge
	r.want(command(setScanout, 0, 0, 8, 8, 0, 5), errParameter)
	r.want(command(setScanout, 8, 4, 16, 12, 0, 4), okNoData)
	img, err := r.dev.Screenshot()
	if err != nil || img.Bounds().Dx() != 16 || img.Bounds().Dy() != 12 || img.Pix[0] != 0 || img.Pix[3] != 0xff {
		t.Fatalf("before a flush: %v, %v, first pixel %v: want 16x12 black", err, img.Bounds(), img.Pix[:4])
	}
	frame := r.dev.Frame()
	r.want(command(flush, 0, 0, 64, 64, 4, 0), okNoData)
	if r.dev.Frame() <= frame {
		t.Fatal("a flush of the scanout's 3D resource made no frame")
	}
	f.mu.Lock()
	reads := append([][5]uint32(nil), f.reads...)
	f.mu.Unlock()
	if len(reads) != 1 || reads[0] != [5]uint32{4, 8, 4, 16, 12} {
		t.Fatalf("renderer reads %v, want the scanout's rectangle of resource 4", reads)
	}
	img, err = r.dev.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	// Pixel (3, 2) of the display is (11, 6) of the resource.
	if got := img.RGBAAt(3, 2); got.R != 0x80 || got.G != 6 || got.B != 11 || got.A != 0xff {
		t.Fatalf("pixel (3, 2) is %v, want R 0x80 G 6 B 11", got)
	}
	// A flush of a resource not on the scanout reads nothing.
	r.want(command(create3D, 6, 2, fmtB8G8R8X8, 1<<1, 64, 64, 1, 1, 0, 0, 0, 0), okNoData)
	r.want(command(flush, 0, 0, 64, 64, 6, 0), okNoData)
	f.mu.Lock()
	n := len(f.reads)
	f.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d reads, want none for a resource off the scanout", n-1)
	}
	r.want(command(unref, 4, 0), okNoData)
	if _, err := r.dev.Screenshot(); !errors.Is(err, gpu.ErrNoScanout) {
		t.Fatalf("screenshot after the shown resource went: %v", err)
	}
}
