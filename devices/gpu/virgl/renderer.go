package virgl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/smolvm/smol/virtio"
	"golang.org/x/sys/unix"
)

// HelperName is the helper's file name: smol looks for it beside its own
// executable, then on PATH.
const HelperName = "smol-gpu"

// DefaultTimeout bounds one command's round trip, and the helper's start
// (loading Mesa, creating the first GL context), before the helper is
// taken for hung and killed. It is generous: the test box renders with a
// software CPU under a software CPU.
const DefaultTimeout = 2 * time.Minute

// ErrGone reports a helper that died, hung or broke the protocol: the
// guest's 3D is over for this machine's life.
var ErrGone = errors.New("the 3D renderer (smol-gpu) is gone")

// Region maps a run of guest physical addresses to the memory file.
type Region struct{ GuestAddr, Size, FileOffset uint64 }

// Config says how to start a renderer.
type Config struct {
	// Helper is the smol-gpu executable.
	Helper string
	// Memory is the guest's RAM, which the VMM maps shared; Regions
	// say where guest addresses lie in it.
	Memory  *os.File
	Regions []Region
	// ScanoutBytes sizes the buffer through which the helper hands over
	// what a 3D resource on the display shows (ReadScanout); zero: 3D
	// resources cannot be shown.
	ScanoutBytes int
	// Log receives the helper's stderr (virglrenderer and Mesa
	// messages); nil sends it to the log at debug level.
	Log io.Writer
	// Timeout bounds a command and the start; zero means DefaultTimeout.
	Timeout time.Duration
}

// Renderer is a running smol-gpu helper. Its methods are called by the
// device's one worker goroutine; Close may come from anywhere.
type Renderer struct {
	cfg     Config
	conn    *net.UnixConn
	cmd     *exec.Cmd
	capsets []uint32
	exited  chan struct{} // closed when the helper's process has been reaped
	scanout []byte        // the scanout buffer, shared with the helper

	mu   sync.Mutex
	gone error // why the renderer is gone; nil while it works
}

// Start starts the helper in its sandbox and waits for its hello.
func Start(cfg Config) (*Renderer, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = &debugLog{}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("smol-gpu: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "smol-gpu"), os.NewFile(uintptr(fds[1]), "smol-gpu")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("smol-gpu: %w", err)
	}
	conn := fc.(*net.UnixConn)

	scanoutFile, scanout, err := scanoutBuffer(cfg.ScanoutBytes)
	if err != nil {
		conn.Close()
		return nil, err
	}
	defer scanoutFile.Close()
	cmd := exec.Command(cfg.Helper)
	cmd.ExtraFiles = []*os.File{theirs, cfg.Memory, scanoutFile} // fd 3, 4, 5
	cmd.Env = helperEnv(os.Environ())
	cmd.Stderr = cfg.Log
	cmd.SysProcAttr = sandboxAttr()
	if err := cmd.Start(); err != nil {
		conn.Close()
		unix.Munmap(scanout)
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			return nil, fmt.Errorf("smol-gpu: cannot start the renderer in its own user namespace (are user namespaces disabled here?): %w", err)
		}
		return nil, fmt.Errorf("smol-gpu: %w", err)
	}
	r := &Renderer{cfg: cfg, conn: conn, cmd: cmd, exited: make(chan struct{}), scanout: scanout}
	go func() {
		cmd.Wait()
		close(r.exited)
	}()
	conn.SetDeadline(time.Now().Add(cfg.Timeout))
	frame, err := ReadFrame(conn, MaxFrame)
	if err != nil {
		r.kill()
		return nil, fmt.Errorf("smol-gpu did not start: %w%s", err, r.exitNote())
	}
	hello, err := DecodeHello(frame)
	if err != nil {
		r.kill()
		return nil, fmt.Errorf("smol-gpu: %w", err)
	}
	if hello.Err != "" {
		r.kill()
		return nil, fmt.Errorf("smol-gpu: %s", hello.Err)
	}
	r.capsets = hello.Capsets
	return r, nil
}

// scanoutBuffer makes the memfd through which the helper hands over
// scanout pixels, mapped: its pages are only allocated as they are
// written.
func scanoutBuffer(size int) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("smol-gpu-scanout", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("smol-gpu: scanout buffer: %w", err)
	}
	f := os.NewFile(uintptr(fd), "smol-gpu-scanout")
	if size <= 0 {
		return f, nil, nil
	}
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("smol-gpu: scanout buffer: %w", err)
	}
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("smol-gpu: scanout buffer: %w", err)
	}
	return f, m, nil
}

// helperEnv is the helper's environment: nothing of the VMM's but what
// steers Mesa and virglrenderer, and no shader cache (the helper cannot
// write files once sandboxed).
func helperEnv(env []string) []string {
	out := []string{"MESA_SHADER_CACHE_DISABLE=true"}
	for _, kv := range env {
		for _, prefix := range []string{"LIBGL_", "GALLIUM_", "LP_", "MESA_", "EGL_", "VIRGL_", "SMOL_GPU_"} {
			if strings.HasPrefix(kv, prefix) && !strings.HasPrefix(kv, "MESA_SHADER_CACHE") {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

// Capsets returns the capability sets the renderer offers, in index order.
func (r *Renderer) Capsets() []uint32 { return r.capsets }

// PID returns the helper's process ID (as the VMM's PID namespace sees it).
func (r *Renderer) PID() int { return r.cmd.Process.Pid }

// Exited is closed once the helper's process has ended.
func (r *Renderer) Exited() <-chan struct{} { return r.exited }

// Command sends a virtio-gpu control command and returns the response's
// type and body.
func (r *Renderer) Command(cmd []byte) (uint32, []byte, error) {
	return r.roundTrip(binary.LittleEndian.AppendUint32(nil, OpCommand), cmd)
}

// AttachBacking gives the renderer resource id's backing: each entry's
// guest range must lie in one region of guest RAM.
func (r *Renderer) AttachBacking(id uint32, entries []virtio.Buffer) (uint32, []byte, error) {
	ranges := make([]Range, len(entries))
	for i, e := range entries {
		off, ok := r.fileOffset(e.Addr, uint64(e.Len))
		if !ok {
			return 0, nil, fmt.Errorf("backing entry [%#x, +%#x) is not in guest RAM", e.Addr, e.Len)
		}
		ranges[i] = Range{Offset: off, Length: uint64(e.Len)}
	}
	return r.roundTrip(EncodeAttach(id, ranges))
}

// ReadScanout returns the pixels of rectangle (x, y, width, height) of
// 3D resource id, rows of width*4 bytes in the resource's format. The
// slice is the shared scanout buffer: valid until the next call, and only
// on the caller's goroutine (the device's worker).
func (r *Renderer) ReadScanout(id, x, y, width, height uint32) ([]byte, error) {
	n := uint64(width) * uint64(height) * 4
	if n == 0 || n > uint64(len(r.scanout)) {
		return nil, fmt.Errorf("a %dx%d scanout does not fit the %d-byte scanout buffer", width, height, len(r.scanout))
	}
	req := binary.LittleEndian.AppendUint32(nil, OpReadScanout)
	for _, v := range []uint32{id, x, y, width, height} {
		req = binary.LittleEndian.AppendUint32(req, v)
	}
	typ, _, err := r.roundTrip(req)
	if err != nil {
		return nil, err
	}
	if typ != RespOKNoData {
		return nil, fmt.Errorf("the renderer could not read resource %d (%#x)", id, typ)
	}
	return r.scanout[:n:n], nil
}

func (r *Renderer) fileOffset(addr, length uint64) (uint64, bool) {
	for _, g := range r.cfg.Regions {
		if addr >= g.GuestAddr && addr-g.GuestAddr <= g.Size && length <= g.Size-(addr-g.GuestAddr) {
			return g.FileOffset + addr - g.GuestAddr, true
		}
	}
	return 0, false
}

func (r *Renderer) roundTrip(parts ...[]byte) (uint32, []byte, error) {
	if err := r.err(); err != nil {
		return 0, nil, err
	}
	r.conn.SetDeadline(time.Now().Add(r.cfg.Timeout))
	if err := WriteFrame(r.conn, parts...); err != nil {
		if errors.Is(err, ErrFrameTooLarge) {
			return 0, nil, err
		}
		return 0, nil, r.fail(err)
	}
	frame, err := ReadFrame(r.conn, MaxFrame)
	if err != nil {
		return 0, nil, r.fail(err)
	}
	typ, body, err := DecodeReply(frame)
	if err != nil {
		return 0, nil, r.fail(err)
	}
	return typ, body, nil
}

func (r *Renderer) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

// fail marks the renderer gone for good and kills the helper.
func (r *Renderer) fail(cause error) error {
	note := r.exitNote() // it may wait a moment for the exit: not under mu
	r.mu.Lock()
	if r.gone == nil {
		r.gone = fmt.Errorf("%w: %v%s", ErrGone, cause, note)
	}
	err := r.gone
	r.mu.Unlock()
	r.kill()
	return err
}

// exitNote describes how the helper ended, if it has.
func (r *Renderer) exitNote() string {
	select {
	case <-r.exited:
		if ps := r.cmd.ProcessState; ps != nil {
			return " (helper " + ps.String() + ")"
		}
	case <-time.After(100 * time.Millisecond):
	}
	return ""
}

func (r *Renderer) kill() {
	r.conn.Close()
	r.cmd.Process.Kill()
}

// Close stops the helper.
func (r *Renderer) Close() error {
	r.mu.Lock()
	if r.gone == nil {
		r.gone = fmt.Errorf("%w: closed", ErrGone)
	}
	r.mu.Unlock()
	r.kill()
	<-r.exited
	if r.scanout != nil {
		unix.Munmap(r.scanout)
		r.scanout = nil
	}
	return nil
}

// ErrNoHelper reports that smol-gpu is not installed.
var ErrNoHelper = errors.New(`--gpu=virgl needs the 3D renderer helper smol-gpu beside smol or on PATH: build it with "make gpu" (needs libvirglrenderer-dev)`)

// FindHelper returns smol-gpu's path: $SMOL_GPU_HELPER, else the file
// beside the running executable (bin/smol-gpu beside bin/smol), else on
// PATH.
func FindHelper() (string, error) {
	if p := os.Getenv("SMOL_GPU_HELPER"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("SMOL_GPU_HELPER=%s: not an executable file", p)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), HelperName); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(HelperName); err == nil {
		return p, nil
	}
	return "", ErrNoHelper
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// debugLog passes the helper's stderr (virglrenderer's and Mesa's
// messages) to the VMM's log at debug level, a line at a time.
type debugLog struct{ partial []byte }

func (l *debugLog) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		slog.Debug("smol-gpu: " + string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 4096 {
		slog.Debug("smol-gpu: " + string(l.partial))
		l.partial = nil
	}
	return len(p), nil
}
