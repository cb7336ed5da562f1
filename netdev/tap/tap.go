package tap

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// HeaderSize is the virtio-net header every frame carries on the TAP: the
// virtio 1.x struct virtio_net_hdr including num_buffers (12 bytes). The TUN
// driver fills only its first 10 bytes on reads and ignores the last two on
// writes, so the device sets num_buffers itself.
const HeaderSize = 12

// tunPath is the TUN/TAP clone device.
const tunPath = "/dev/net/tun"

// TAP is one open TAP interface. Frames are read and written with readv and
// writev straight from and to the caller's buffers (guest memory for the
// virtio-net device).
//
// The file descriptor is non-blocking and registered with the Go runtime's
// poller: ReadPacket never blocks, WaitReadable parks the goroutine (no
// thread, no busy loop) until a frame is pending, and WritePacket waits for
// room the rare time the kernel has none. One goroutine may read (and wait)
// while another writes.
type TAP struct {
	name      string
	file      *os.File
	raw       syscall.RawConn
	supported uint64 // virtio-net offload features the kernel accepted

	// waitMu serialises WaitReadable: each call owns the read deadline
	// while it waits.
	waitMu sync.Mutex
}

// Create opens the TAP interface name, creating it if it does not exist,
// with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR and a 12-byte little-endian virtio-net
// header, and brings its link up. An empty name lets the kernel choose one
// (tap0, tap1, ...); Name reports it. Guest offloads start disabled until
// SetOffloads.
//
// Errors wrap ErrNeedsNetAdmin, ErrInvalidName, ErrNoTunDevice, ErrBusy or
// ErrNotTAP where one of them is the reason.
func Create(name string) (*TAP, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	display := name
	if display == "" {
		display = "(kernel-named)"
	}
	fd, err := unix.Open(tunPath, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, describeOpenError(display, &os.PathError{Op: "open", Path: tunPath, Err: err})
	}
	actual, supported, err := attach(fd, name, display)
	if err != nil {
		unix.Close(fd) // a TAP created through this fd disappears with it
		return nil, err
	}
	file := os.NewFile(uintptr(fd), tunPath+" ("+actual+")")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("TAP %s: %w", actual, err)
	}
	t := &TAP{name: actual, file: file, raw: raw, supported: supported}
	if err := t.bringUp(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// attach binds fd to the TAP, configures the header and probes the
// offloads; it returns the interface's name and the offloads supported.
func attach(fd int, name, display string) (string, uint64, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return "", 0, fmt.Errorf("TAP name %q: %w: %w", name, ErrInvalidName, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return "", 0, describeSetIffError(display, err)
	}
	actual := ifr.Name()
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, HeaderSize); err != nil {
		return "", 0, fmt.Errorf("TAP %s: set virtio-net header size %d: %w", actual, HeaderSize, err)
	}
	// virtio 1.x headers are little-endian whatever the host; say so
	// rather than rely on the host being little-endian.
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETLE, 1); err != nil {
		return "", 0, fmt.Errorf("TAP %s: set little-endian virtio-net header: %w", actual, err)
	}
	supported, err := probeOffloads(fd)
	if err != nil {
		return "", 0, fmt.Errorf("TAP %s: %w", actual, err)
	}
	return actual, supported, nil
}

// Name returns the interface name.
func (t *TAP) Name() string { return t.name }

// ReadPacket reads one frame (virtio-net header and Ethernet frame) into
// bufs, in order, without blocking. It returns the number of bytes stored;
// a frame longer than bufs is truncated to fit, so a caller that must detect
// oversized frames offers one byte more than the largest frame it accepts.
// With no frame pending it returns syscall.EAGAIN, unwrapped.
func (t *TAP) ReadPacket(bufs [][]byte) (int, error) {
	var n int
	var rerr error
	// Control, not Read: a concurrent WaitReadable holds the poller's read
	// lock while it waits, and a non-blocking readv needs no waiting.
	if err := t.raw.Control(func(fd uintptr) {
		n, rerr = unix.Readv(int(fd), bufs)
	}); err != nil {
		return 0, fmt.Errorf("read TAP %s: %w", t.name, err)
	}
	if rerr != nil {
		if rerr == unix.EAGAIN {
			return 0, rerr
		}
		return 0, fmt.Errorf("read TAP %s: %w", t.name, rerr)
	}
	return n, nil
}

// WritePacket writes one frame (virtio-net header and Ethernet frame)
// gathered from bufs. The kernel validates the header and refuses a bad one
// with EINVAL. It waits for room when the kernel has none, which with the
// TAP's unlimited send buffer does not happen in practice.
func (t *TAP) WritePacket(bufs [][]byte) (int, error) {
	var n int
	var werr error
	err := t.raw.Write(func(fd uintptr) bool {
		n, werr = unix.Writev(int(fd), bufs)
		return werr != unix.EAGAIN
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return n, fmt.Errorf("write TAP %s: %w", t.name, err)
	}
	return n, nil
}

// WaitReadable blocks until a frame is pending, ctx is done (it then
// returns ctx.Err()) or the TAP is closed.
func (t *TAP) WaitReadable(ctx context.Context) error {
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := t.file.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("wait for TAP %s: %w", t.name, err)
	}
	// Cancellation moves the read deadline into the past, which wakes the
	// poller's wait. The deadline stays set until the next call clears it;
	// ReadPacket does not use deadlines.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		t.file.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
	}()

	var pollErr error
	err := t.raw.Read(func(fd uintptr) bool {
		// The poller is edge-triggered: look at the level first, so a
		// frame that arrived before this call (and whose edge was
		// consumed) is not waited for again.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				pollErr = err
				return true
			}
			return n > 0
		}
	})
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err == nil {
		err = pollErr
	}
	if err != nil {
		return fmt.Errorf("wait for TAP %s: %w", t.name, err)
	}
	return nil
}

// Close closes the TAP. An interface Create made disappears; a persistent
// one made beforehand stays. Waiters and writers return with an error.
func (t *TAP) Close() error {
	if err := t.file.Close(); err != nil {
		return fmt.Errorf("close TAP %s: %w", t.name, err)
	}
	return nil
}
