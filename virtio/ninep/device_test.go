package ninep_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/ninep"
	vt "github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

const wait = 5 * time.Second

// msg builds a 9P message: size[4] type[1] tag[2] body.
func msg(typ byte, tag uint16, body ...[]byte) []byte {
	b := []byte{0, 0, 0, 0, typ, byte(tag), byte(tag >> 8)}
	for _, p := range body {
		b = append(b, p...)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	return b
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func str(s string) []byte { return append(binary.LittleEndian.AppendUint16(nil, uint16(len(s))), s...) }

// 9P2000.L message types used here.
const (
	tversion, rversion = 100, 101
	tattach, rattach   = 104, 105
	rlerror            = 7
)

func start(t *testing.T) (*vt.Driver, *vt.DriverQueue) {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	d := startDevice(t, dir, 8<<20)
	return d, d.Queues[0]
}

// startDevice serves dir through a new device over memSize bytes of
// guest RAM and initialises it as a guest's driver does; all of it is
// released when the test ends.
func startDevice(tb testing.TB, dir string, memSize uint64) *vt.Driver {
	tb.Helper()
	mem, err := memory.New(memSize)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mem.Close() })
	dev, err := ninep.New(dir, "smol0", false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	d := vt.Init(tb, virtio.NewMMIO(dev, mem, vt.NewIRQ()), mem, vt.Options{})
	tb.Cleanup(d.Reset)
	return d
}

// openData negotiates msize, attaches and opens the served directory's
// file "data" read-write as fid 1, one request at a time.
func openData(tb testing.TB, d *vt.Driver, msize uint32) {
	tb.Helper()
	q := d.Queues[0]
	for _, step := range []struct {
		m    []byte
		want byte
	}{
		{msg(tversion, 0xffff, u32(msize), str("9P2000.L")), rversion},
		{msg(tattach, 1, u32(0), u32(^uint32(0)), str("root"), str(""), u32(0)), rattach},
		{msg(twalk, 1, u32(0), u32(1), []byte{1, 0}, str("data")), rwalk},
		{msg(tlopen, 1, u32(1), u32(2)), rlopen}, // O_RDWR
	} {
		q.AddChain([][]byte{step.m}, []uint32{4096})
		d.Notify(0)
		if u := q.WaitUsed(1, wait); len(u) != 1 || u[0].Data[4] != step.want {
			tb.Fatalf("type %d answered %+v", step.m[4], u)
		}
	}
}

// TestDeviceCarriesMessages: the mount tag is in the config space;
// requests travel to the server and replies come back in their own
// chains; a request whose framing lies is completed empty and does not
// derail the ones after it.
func TestDeviceCarriesMessages(t *testing.T) {
	d, q := start(t)
	if d.Read32(vt.RegDeviceID) != uint32(ninep.ID) {
		t.Fatalf("device ID %d", d.Read32(vt.RegDeviceID))
	}
	var cfg []byte
	for i := uint64(0); i < 7; i++ { // as the guest reads it: byte by byte
		cfg = append(cfg, d.ReadConfig(i, 1)...)
	}
	if binary.LittleEndian.Uint16(cfg) != 5 || string(cfg[2:]) != "smol0" {
		t.Fatalf("config %q", cfg)
	}
	version := msg(tversion, 0xffff, u32(64<<10), str("9P2000.L"))
	lying := msg(tversion, 1, u32(8192), str("9P2000.L"))
	binary.LittleEndian.PutUint32(lying, 4000) // says more than it holds
	attach := msg(tattach, 2, u32(0), u32(^uint32(0)), str("root"), str(""), u32(0))

	hv := q.AddChain([][]byte{version}, []uint32{4096})
	d.Notify(0)
	used := q.WaitUsed(1, wait)
	if len(used) != 1 || used[0].Head != hv || used[0].Data[4] != rversion {
		t.Fatalf("Tversion answered %+v", used)
	}
	hl := q.AddChain([][]byte{lying[:7], lying[7:]}, []uint32{4096})
	ha := q.AddChain([][]byte{attach}, []uint32{64, 4096}) // the reply crosses buffers
	d.Notify(0)
	got := map[uint16]vt.UsedElem{}
	for _, u := range q.WaitUsed(2, wait) {
		got[u.Head] = u
	}
	if u := got[hl]; u.Len != 0 {
		t.Errorf("a lying request was answered with %d bytes", u.Len)
	}
	if u := got[ha]; u.Len < 7 || u.Data[4] != rattach || binary.LittleEndian.Uint16(u.Data[5:]) != 2 {
		t.Errorf("Tattach answered %+v", u)
	}
}
