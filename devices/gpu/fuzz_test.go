package gpu

import (
	"encoding/binary"
	"testing"

	"github.com/smolvm/smol/devices/gpu/virgl"
	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/vmm/memory"
)

// FuzzCommands runs sequences of arbitrary control and cursor commands
// against a device with small limits. It must not panic, must answer every
// control command with a response of a known type, and must keep its
// accounting within the limits: host bytes never above MaxHostBytes and
// equal to the sum of the resources' sizes, no more than MaxResources
// resources, and a scanout only on a resource that exists and contains it.
func FuzzCommands(f *testing.F) {
	mem, err := memory.New(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { mem.Close() })
	cmd := func(typ uint32, fields ...uint32) []byte {
		b := make([]byte, headerSize)
		binary.LittleEndian.PutUint32(b, typ)
		for _, v := range fields {
			b = binary.LittleEndian.AppendUint32(b, v)
		}
		return b
	}
	seq := func(cmds ...[]byte) []byte {
		var out []byte
		for _, c := range cmds {
			out = binary.LittleEndian.AppendUint16(out, uint16(len(c)))
			out = append(out, c...)
		}
		return out
	}
	f.Add(seq(cmd(cmdResourceCreate2D, 1, formatB8G8R8X8, 8, 8),
		cmd(cmdResourceAttachBacking, 1, 1, 0x1000, 0, 256, 0),
		cmd(cmdTransferToHost2D, 0, 0, 8, 8, 0, 0, 1, 0),
		cmd(cmdSetScanout, 0, 0, 8, 8, 0, 1),
		cmd(cmdResourceFlush, 0, 0, 8, 8, 1, 0),
		cmd(cmdResourceUnref, 1, 0)))
	f.Add(seq(cmd(cmdGetDisplayInfo), cmd(cmdGetEDID, 0, 0), cmd(cmdUpdateCursor, 0, 1, 2, 0, 1, 0, 0, 0)))
	f.Add(seq(cmd(cmdResourceCreate2D, 2, formatR8G8B8A8, 100, 100), cmd(cmdResourceAttachBacking, 2, 2, 0, 0, 0x10000, 0, 0x8000, 0, 0x10000, 0)))
	// 3D commands go to a renderer that answers OK (and a capset info
	// with a body); the device's own 3D bookkeeping is what is checked.
	f.Add(seq(cmd(cmdResourceCreate2D, 1, formatB8G8R8X8, 8, 8),
		cmd(virgl.CmdResourceCreate3D, 2, 2, 67, 10, 64, 64, 1, 1, 0, 0, 0, 0),
		cmd(virgl.CmdResourceCreate3D, 1, 2, 67, 10, 64, 64, 1, 1, 0, 0, 0, 0),
		cmd(cmdResourceAttachBacking, 2, 1, 0x1000, 0, 256, 0),
		cmd(virgl.CmdSubmit3D, 8, 0, 1, 2),
		cmd(cmdResourceUnref, 2, 0),
		cmd(cmdGetCapsetInfo, 0, 0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := New(Config{Limits: Limits{MaxResources: 4, MaxHostBytes: 64 << 10, MaxBackingEntries: 8}, Renderer: okRenderer{}})
		if err != nil {
			t.Fatal(err)
		}
		for len(data) >= 2 {
			n := int(binary.LittleEndian.Uint16(data))
			data = data[2:]
			c := data[:min(n, len(data))]
			data = data[len(c):]
			d.mu.Lock()
			if len(c) >= headerSize && le32(c)&0xff00 == 0x0300 {
				d.cursorCommand(c)
			} else if len(c) >= headerSize {
				resp := d.control(mem, c)
				if typ := le32(resp); typ < respOKNoData || typ > respErrInvalidParameter || (typ > respOKEDID && typ < respErrUnspec) {
					t.Fatalf("response type %#x", typ)
				}
			}
			checkInvariants(t, d)
			d.mu.Unlock()
		}
	})
}

// okRenderer accepts every command.
type okRenderer struct{}

func (okRenderer) Capsets() []uint32 { return []uint32{1} }
func (okRenderer) Command(cmd []byte) (uint32, []byte, error) {
	if le32(cmd) == cmdGetCapsetInfo {
		return virgl.RespOKCapsetInfo, make([]byte, 16), nil
	}
	return respOKNoData, nil, nil
}
func (okRenderer) AttachBacking(uint32, []virtio.Buffer) (uint32, []byte, error) {
	return respOKNoData, nil, nil
}
func (okRenderer) ReadScanout(_, _, _, w, h uint32) ([]byte, error) {
	return make([]byte, uint64(w)*uint64(h)*4), nil
}
func (okRenderer) Close() error { return nil }

func checkInvariants(t *testing.T, d *Device) {
	t.Helper()
	total := uint64(0)
	for id, r := range d.res.byID {
		if id == 0 || uint64(len(r.pixels)) != uint64(r.width)*uint64(r.height)*bytesPerPixel {
			t.Fatalf("resource %d: %dx%d with %d bytes", id, r.width, r.height, len(r.pixels))
		}
		total += uint64(len(r.pixels))
	}
	if total != d.res.hostBytes || total > d.limits.MaxHostBytes || len(d.res.byID) > d.limits.MaxResources {
		t.Fatalf("%d resources, %d bytes (accounted %d)", len(d.res.byID), total, d.res.hostBytes)
	}
	for id := range d.res3D {
		if id == 0 || d.res.byID[id] != nil {
			t.Fatalf("3D resource %d: ID 0 or also a 2D resource", id)
		}
	}
	if len(d.res3D)+len(d.res.byID) > d.limits.MaxResources {
		t.Fatalf("%d 2D and %d 3D resources, limit %d", len(d.res.byID), len(d.res3D), d.limits.MaxResources)
	}
	if id := d.scanout.resourceID; id != 0 {
		r := d.res.byID[id]
		if r == nil || !d.scanout.rect.within(r.width, r.height) || d.scanout.rect.empty() {
			t.Fatalf("scanout on resource %d rect %+v", id, d.scanout.rect)
		}
		screenshot(r, d.scanout.rect)
	}
}
