//go:build cgo

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/smolvm/smol/devices/gpu/virgl"
	"golang.org/x/sys/unix"
)

// The descriptors the VMM hands over (package devices/gpu/virgl).
const (
	socketFD  = 3
	memoryFD  = 4
	scanoutFD = 5
)

// Every virglrenderer call must come from one thread: its GL contexts
// are current there.
func init() { runtime.LockOSThread() }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "smol-gpu:", err)
		os.Exit(1)
	}
}

func run() error {
	var st unix.Stat_t
	if err := unix.Fstat(socketFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return errors.New("smol-gpu is started by smol's VMM (smol run --gpu=virgl), not by hand")
	}
	conn := os.NewFile(socketFD, "vmm")
	hello := func(h virgl.Hello) error { return virgl.WriteFrame(conn, h.Encode()) }

	mem, err := mapShared(memoryFD, "guest memory", false)
	if err != nil {
		hello(virgl.Hello{Err: err.Error()})
		return err
	}
	scanout, err := mapShared(scanoutFD, "scanout buffer", true)
	if err != nil {
		hello(virgl.Hello{Err: err.Error()})
		return err
	}
	r, err := newRenderer(mem, scanout)
	if err != nil {
		hello(virgl.Hello{Err: err.Error()})
		return err
	}
	// Mesa and virglrenderer are loaded and the first GL context made:
	// from here on the helper needs no file and no new process.
	if err := confine(); err != nil {
		err = fmt.Errorf("sandbox: %w", err)
		hello(virgl.Hello{Err: err.Error()})
		return err
	}
	if err := hello(virgl.Hello{Capsets: r.capsets()}); err != nil {
		return err
	}
	return serve(conn, r)
}

// mapShared maps the file at fd, shared and writable: guest RAM (resource
// backings are read and written in place, where the guest sees them) or
// the scanout buffer, which may be empty.
func mapShared(fd int, what string, mayBeEmpty bool) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s (fd %d): %w", what, fd, err)
	}
	if st.Size == 0 && mayBeEmpty {
		unix.Close(fd)
		return nil, nil
	}
	if st.Size <= 0 || st.Size > 1<<46 {
		return nil, fmt.Errorf("%s of %d bytes", what, st.Size)
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", what, err)
	}
	unix.Close(fd)
	return m, nil
}

// serve answers the VMM's requests until it hangs up.
func serve(conn io.ReadWriter, r *renderer) error {
	for {
		req, err := virgl.ReadFrame(conn, virgl.MaxFrame)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(req) < 4 {
			return errors.New("request without an op")
		}
		var typ uint32
		var body []byte
		switch le32(req) {
		case virgl.OpCommand:
			typ, body = r.command(req[4:])
		case virgl.OpAttachBacking:
			res, ranges, err := virgl.DecodeAttach(req[4:])
			if err != nil {
				return err
			}
			mr := make([]memRange, len(ranges))
			for i, g := range ranges {
				mr[i] = memRange{g.Offset, g.Length}
			}
			typ = r.attachBacking(res, mr)
		case virgl.OpReadScanout:
			if len(req) != 4+20 {
				return errors.New("read scanout: malformed request")
			}
			typ = r.readScanout(le32(req[4:]), le32(req[8:]), le32(req[12:]), le32(req[16:]), le32(req[20:]))
		default:
			return fmt.Errorf("unknown op %d", le32(req))
		}
		if err := virgl.WriteFrame(conn, virgl.EncodeReply(typ, body)); err != nil {
			return err
		}
	}
}
