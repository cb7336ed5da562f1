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
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	dev, err := ninep.New(dir, "smol0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	d := vt.Init(t, virtio.NewMMIO(dev, mem, vt.NewIRQ()), mem, vt.Options{})
	t.Cleanup(d.Reset)
	return d, d.Queues[0]
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
