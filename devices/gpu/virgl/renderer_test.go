package virgl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/smolvm/smol/virtio"
	"golang.org/x/sys/unix"
)

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if helperPath != "" {
		os.RemoveAll(filepath.Dir(helperPath))
	}
	os.Exit(code)
}

// helper builds smol-gpu for the tests (cgo and libvirglrenderer-dev,
// which make test's dependencies include).
func helper(t *testing.T) string {
	t.Helper()
	helperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "smol-gpu-test")
		if err != nil {
			helperErr = err
			return
		}
		helperPath = filepath.Join(dir, HelperName)
		cmd := exec.Command("go", "build", "-o", helperPath, "github.com/smolvm/smol/cmd/smol-gpu")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = errors.New("go build smol-gpu (make deps installs libvirglrenderer-dev): " + err.Error() + "\n" + string(out))
		}
	})
	if helperErr != nil {
		t.Fatal(helperErr)
	}
	return helperPath
}

// guestRAM is a memfd standing in for a guest's RAM: size bytes at guest
// address 0.
func guestRAM(t *testing.T, size int) (*os.File, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("test-ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "test-ram")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return f, m
}

func start(t *testing.T, ram *os.File, size uint64) *Renderer {
	t.Helper()
	var log bytes.Buffer
	r, err := Start(Config{Helper: helper(t), Memory: ram, Regions: []Region{{0, size, 0}}, Log: &log, ScanoutBytes: 1 << 16})
	if err != nil {
		t.Fatalf("start: %v\nhelper's log:\n%s", err, log.String())
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// command builds a virtio-gpu command: header (type, flags, fence 7,
// context ctx) and le32 fields.
func command(typ, flags, ctx uint32, fields ...uint32) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint32(b, typ)
	binary.LittleEndian.PutUint32(b[4:], flags)
	binary.LittleEndian.PutUint64(b[8:], 7)
	binary.LittleEndian.PutUint32(b[16:], ctx)
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint32(b, f)
	}
	return b
}

func expect(t *testing.T, what string, r *Renderer, cmd []byte, want uint32) []byte {
	t.Helper()
	typ, body, err := r.Command(cmd)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if typ != want {
		t.Fatalf("%s: response %#x, want %#x", what, typ, want)
	}
	return body
}

// A 4x4 texture goes to the renderer from guest RAM and comes back into
// other guest RAM byte for byte: commands, backing, transfers both ways
// and fences through the real virglrenderer.
func TestTextureRoundTripThroughTheRenderer(t *testing.T) {
	const size = 1 << 20
	ram, mem := guestRAM(t, size)
	r := start(t, ram, size)

	if len(r.Capsets()) == 0 || r.Capsets()[0] != 1 {
		t.Fatalf("capsets %v, want VIRGL (1) first", r.Capsets())
	}
	info := expect(t, "GET_CAPSET_INFO", r, command(0x108, 0, 0, 0, 0), 0x1102)
	if id, v, n := binary.LittleEndian.Uint32(info), binary.LittleEndian.Uint32(info[4:]), binary.LittleEndian.Uint32(info[8:]); id != 1 || v < 1 || n == 0 {
		t.Fatalf("capset info: id %d version %d size %d", id, v, n)
	}
	caps := expect(t, "GET_CAPSET", r, command(0x109, 0, 0, 1, 1), 0x1103)
	if len(caps) != int(binary.LittleEndian.Uint32(info[8:])) {
		t.Fatalf("capset: %d bytes, info said %d", len(caps), binary.LittleEndian.Uint32(info[8:]))
	}

	ctxCreate := command(0x200, 0, 1, 4, 0)
	ctxCreate = append(ctxCreate, make([]byte, 64)...)
	copy(ctxCreate[32:], "test")
	expect(t, "CTX_CREATE", r, ctxCreate, 0x1100)
	// RGBA8 2D texture, 4x4, sampler view and render target.
	const res, fmtRGBA8, texture2D, bind = 5, 67, 2, 1<<1 | 1<<3
	expect(t, "RESOURCE_CREATE_3D", r, command(0x204, 0, 1, res, texture2D, fmtRGBA8, bind, 4, 4, 1, 1, 0, 0, 0, 0), 0x1100)
	expect(t, "CTX_ATTACH_RESOURCE", r, command(0x202, 0, 1, res, 0), 0x1100)

	pattern := make([]byte, 64)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	copy(mem[0x1000:], pattern)
	typ, _, err := r.AttachBacking(res, []virtio.Buffer{{Addr: 0x1000, Len: 32}, {Addr: 0x1020, Len: 32}})
	if err != nil || typ != 0x1100 {
		t.Fatalf("attach: %#x %v", typ, err)
	}
	// box x y z w h d, offset (le64), resource, level, stride, layer stride
	transfer := func(typ uint32) []byte {
		return command(typ, 1, 1, 0, 0, 0, 4, 4, 1, 0, 0, res, 0, 16, 0)
	}
	expect(t, "TRANSFER_TO_HOST_3D", r, transfer(0x205), 0x1100)
	clear(mem[0x1000:0x1040])
	expect(t, "TRANSFER_FROM_HOST_3D", r, transfer(0x206), 0x1100)
	if !bytes.Equal(mem[0x1000:0x1040], pattern) {
		t.Fatalf("read back\n%x\nwant\n%x", mem[0x1000:0x1040], pattern)
	}

	// What a display would show of it: a 2x2 rectangle at (1, 1), read
	// into the scanout buffer, rows of 8 bytes.
	shown, err := r.ReadScanout(res, 1, 1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(nil), pattern[16+4:16+12]...), pattern[32+4:32+12]...)
	if !bytes.Equal(shown, want) {
		t.Fatalf("scanout read\n%x\nwant\n%x", shown, want)
	}
	if _, err := r.ReadScanout(res, 0, 0, 200, 200); err == nil {
		t.Fatal("a scanout larger than the buffer was read")
	}
	if _, err := r.ReadScanout(res, 2, 2, 4, 4); err == nil {
		t.Fatal("a scanout past the resource's edge was read")
	}

	expect(t, "DETACH_BACKING", r, command(0x107, 0, 0, res, 0), 0x1100)
	expect(t, "DETACH_BACKING again", r, command(0x107, 0, 0, res, 0), 0x1200)
	expect(t, "RESOURCE_UNREF", r, command(0x102, 0, 0, res, 0), 0x1100)
	expect(t, "CTX_DESTROY", r, command(0x201, 0, 1), 0x1100)
}

// What a hostile guest can send reaches the helper as errors, never as a
// crash: truncated commands, an unknown capset, a backing outside RAM,
// a command buffer longer than the command, a context ID of 0.
func TestRendererRefusesBadCommands(t *testing.T) {
	const size = 1 << 20
	ram, _ := guestRAM(t, size)
	r := start(t, ram, size)
	expect(t, "truncated CREATE_3D", r, command(0x204, 0, 1, 5, 2), 0x1200)
	expect(t, "capset index 99", r, command(0x108, 0, 0, 99, 0), 0x1205)
	expect(t, "capset 77", r, command(0x109, 0, 0, 77, 1), 0x1205)
	expect(t, "context 0", r, append(command(0x200, 0, 0, 4, 0), make([]byte, 64)...), 0x1204)
	expect(t, "resource 0", r, command(0x204, 0, 1, 0, 2, 67, 2, 4, 4, 1, 1, 0, 0, 0, 0), 0x1203)
	submit := command(0x207, 0, 1, 4096, 0)
	expect(t, "submit longer than the command", r, append(submit, 1, 2, 3, 4), 0x1205)
	expect(t, "unknown command", r, command(0x999, 0, 0), 0x1200)
	if _, _, err := r.AttachBacking(5, []virtio.Buffer{{Addr: size - 16, Len: 32}}); err == nil {
		t.Fatal("a backing entry past the end of RAM was sent")
	}
	// Still alive after all of it.
	expect(t, "GET_CAPSET_INFO", r, command(0x108, 0, 0, 0, 0), 0x1102)
}

// The helper runs confined: an empty root, seccomp on, no new privileges,
// a network namespace of its own.
func TestHelperIsSandboxed(t *testing.T) {
	const size = 1 << 20
	ram, _ := guestRAM(t, size)
	r := start(t, ram, size)
	pid := r.PID()
	entries, err := os.ReadDir(filepath.Join("/proc", itoa(pid), "root"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the helper's root has %d entries, want an empty directory", len(entries))
	}
	status, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("helper's status lacks %q", want)
		}
	}
	for _, ns := range []string{"net", "mnt", "user", "pid"} {
		ours, _ := os.Readlink("/proc/self/ns/" + ns)
		theirs, err := os.Readlink(filepath.Join("/proc", itoa(pid), "ns", ns))
		if err != nil || theirs == ours {
			t.Errorf("%s namespace: helper %q, VMM %q: want its own", ns, theirs, ours)
		}
	}
}

// A helper that dies breaks the renderer, not its caller: the next
// command fails with ErrGone, and so does every later one.
func TestHelperDeathIsAnError(t *testing.T) {
	const size = 1 << 20
	ram, _ := guestRAM(t, size)
	r := start(t, ram, size)
	if err := unix.Kill(r.PID(), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.Exited()
	for i := 0; i < 2; i++ {
		if _, _, err := r.Command(command(0x108, 0, 0, 0, 0)); !errors.Is(err, ErrGone) {
			t.Fatalf("command %d after the kill: %v, want ErrGone", i, err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
