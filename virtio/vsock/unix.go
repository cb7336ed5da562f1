package vsock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// This file is the host side: the Unix listener host programs connect to,
// the dialler for guest-initiated connections, and the two goroutines per
// connection that do the blocking socket I/O the device worker must never
// do. They talk to the worker only through hostEvents.

// eventKind says what a hostEvent reports.
type eventKind uint8

const (
	evData    eventKind = iota // the reader read data
	evEOF                      // the reader reached end of stream
	evWritten                  // the writer wrote n bytes
	evFailed                   // a read or write failed: the stream is broken
	evDialed                   // a dial for a guest-initiated connection finished
)

// hostEvent is one report from a host-side goroutine to the worker.
type hostEvent struct {
	kind eventKind
	conn *conn
	data []byte        // evData
	n    int           // evWritten
	sock *net.UnixConn // evDialed, nil on failure
	err  error         // evFailed, evDialed
}

// unixHost is the host side of one device activation. Its goroutines stop
// when stop closes; wg counts them so Reset can wait for every one.
type unixHost struct {
	path   string
	events chan hostEvent // unbuffered: an event is either taken or abandoned at stop
	stop   <-chan struct{}
	ctx    context.Context // cancelled at stop, to abandon dials
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newUnixHost(path string, stop <-chan struct{}) *unixHost {
	ctx, cancel := context.WithCancel(context.Background())
	return &unixHost{path: path, events: make(chan hostEvent), stop: stop, ctx: ctx, cancel: cancel}
}

// portPath is the Unix socket a guest connection to host port reaches.
func portPath(base string, port uint32) string {
	return base + "_" + strconv.FormatUint(uint64(port), 10)
}

// errDialCancelled is the outcome of a dial whose connection the guest
// reset before it finished.
var errDialCancelled = errors.New("vsock: dial cancelled: the connection was reset")

// Dial connects to the host listener for port in the background and reports
// the outcome as evDialed, with the bare socket: the worker starts the
// connection's reader and writer only if the connection still lives, so a
// connection the guest reset never costs more than this one goroutine.
//
// cancel (the guest reset the connection) aborts the dial, or closes the
// socket at once if it already connected; the event is still delivered,
// since it is what frees the connection's slot in the muxer.
func (u *unixHost) Dial(c *conn, port uint32) (cancel func()) {
	path := portPath(u.path, port)
	ctx, cancel := context.WithCancel(u.ctx)
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer cancel()
		dialer := net.Dialer{Timeout: connectTimeout}
		ev := hostEvent{kind: evDialed, conn: c}
		if sock, err := dialer.DialContext(ctx, "unix", path); err == nil {
			ev.sock = sock.(*net.UnixConn)
		} else {
			ev.err = fmt.Errorf("vsock: connect to host listener %s: %w", path, err)
		}
		cancelled := ctx.Done()
		for {
			select {
			case u.events <- ev:
				return
			case <-cancelled:
				if ev.sock != nil {
					ev.sock.Close()
					ev.sock, ev.err = nil, errDialCancelled
				}
				cancelled = nil // now only waiting to report
			case <-u.stop:
				if ev.sock != nil {
					ev.sock.Close()
				}
				return
			}
		}
	}()
	return cancel
}

// unixStream is a connection's host socket with its reader and writer
// goroutines. The worker calls its methods (which never block); the
// goroutines report back through unixHost.events.
type unixStream struct {
	sock   *net.UnixConn
	owner  *conn
	host   *unixHost
	done   chan struct{} // closed by Close
	permit chan struct{} // one read permit at a time
	wake   chan struct{} // the writer has something to do

	mu         sync.Mutex
	out        []byte // queued for the writer
	closeWrite bool   // half-close once out is written

	closeOnce sync.Once
}

func (u *unixHost) newStream(c *conn, sock *net.UnixConn) *unixStream {
	s := &unixStream{
		sock:   sock,
		owner:  c,
		host:   u,
		done:   make(chan struct{}),
		permit: make(chan struct{}, 1),
		wake:   make(chan struct{}, 1),
	}
	u.wg.Add(2)
	go s.readLoop()
	go s.writeLoop()
	return s
}

func (s *unixStream) Send(p []byte) {
	s.mu.Lock()
	s.out = append(s.out, p...)
	s.mu.Unlock()
	s.signal()
}

func (s *unixStream) CloseWrite() {
	s.mu.Lock()
	s.closeWrite = true
	s.mu.Unlock()
	s.signal()
}

func (s *unixStream) PermitRead() {
	select {
	case s.permit <- struct{}{}:
	default:
	}
}

func (s *unixStream) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.sock.Close()
	})
}

func (s *unixStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// emit hands ev to the worker; false means the stream or the device is
// shutting down and the goroutine should exit.
func (s *unixStream) emit(ev hostEvent) bool {
	select {
	case s.host.events <- ev:
		return true
	case <-s.done:
		return false
	case <-s.host.stop:
		return false
	}
}

// readLoop reads one chunk per permit. Waiting for the permit is the
// backpressure: the worker grants one only while the connection holds less
// than pendingLimit bytes for the guest, so a guest that does not read makes
// the host program's writes block, not the device's memory grow.
func (s *unixStream) readLoop() {
	defer s.host.wg.Done()
	buf := make([]byte, readChunk)
	for {
		select {
		case <-s.permit:
		case <-s.done:
			return
		case <-s.host.stop:
			return
		}
		n, err := s.sock.Read(buf)
		for n == 0 && err == nil {
			n, err = s.sock.Read(buf)
		}
		if n > 0 {
			var data []byte
			if n < readChunk/2 {
				// Hand over a right-sized copy and keep the big buffer.
				data = append([]byte(nil), buf[:n]...)
			} else {
				data, buf = buf[:n], make([]byte, readChunk)
			}
			if !s.emit(hostEvent{kind: evData, conn: s.owner, data: data}) {
				return
			}
		}
		if err != nil {
			ev := hostEvent{kind: evEOF, conn: s.owner}
			if !errors.Is(err, io.EOF) {
				ev = hostEvent{kind: evFailed, conn: s.owner, err: err}
			}
			s.emit(ev)
			return
		}
	}
}

// writeLoop writes what the worker queued, reporting each write so the
// device can return credit to the guest only for bytes the host took.
func (s *unixStream) writeLoop() {
	defer s.host.wg.Done()
	var spare []byte // the buffer written last time, reused for queueing
	for {
		s.mu.Lock()
		data, closeWrite := s.out, s.closeWrite
		if len(data) > 0 {
			s.out = spare[:0]
		}
		s.mu.Unlock()

		if len(data) == 0 {
			if closeWrite {
				// Half-close: the host program reads EOF. Errors (the peer
				// already gone) surface on the next read.
				_ = s.sock.CloseWrite()
				return
			}
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			case <-s.host.stop:
				return
			}
		}
		n, err := s.sock.Write(data)
		if n > 0 && !s.emit(hostEvent{kind: evWritten, conn: s.owner, n: n}) {
			return
		}
		if err != nil {
			s.emit(hostEvent{kind: evFailed, conn: s.owner, err: err})
			return
		}
		spare = data
	}
}

// incomingConn is a host program's connection that asked for a guest port.
type incomingConn struct {
	sock *net.UnixConn
	port uint32
}

// listener accepts host programs on the device's Unix socket and reads
// their CONNECT line. It lives as long as the device (host programs may
// connect before the guest driver is up; they wait up to connectTimeout for
// an active device) and hands connections to whichever worker is running.
type listener struct {
	ln       *net.UnixListener
	incoming chan incomingConn // unbuffered: handed over or closed, never lost
	closed   chan struct{}
	wg       sync.WaitGroup

	mu          sync.Mutex
	handshaking map[*net.UnixConn]struct{} // closed by close, to end their reads
}

// listenUnix creates the device's listening socket at path. A stale socket
// file (nothing accepting on it, as after a crash) is replaced; a live one or
// a file that is not a socket is refused with a typed error.
func listenUnix(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s (for %s)", ErrSocketDirMissing, dir, path)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%w: %s", ErrSocketPathOccupied, path)
		}
		probe, err := net.DialTimeout("unix", path, time.Second)
		switch {
		case err == nil:
			probe.Close()
			return nil, fmt.Errorf("%w: %s", ErrSocketInUse, path)
		case errors.Is(err, syscall.ECONNREFUSED):
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("vsock: remove stale socket %s: %w", path, err)
			}
		case errors.Is(err, syscall.ENOENT):
		default:
			return nil, fmt.Errorf("vsock: probe existing socket %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w: %s", ErrSocketInUse, path)
		}
		return nil, fmt.Errorf("vsock: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

func newListener(path string) (*listener, error) {
	ln, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	l := &listener{
		ln:          ln,
		incoming:    make(chan incomingConn),
		closed:      make(chan struct{}),
		handshaking: make(map[*net.UnixConn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		sock, err := l.ln.AcceptUnix()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, go on.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !l.track(sock) {
			sock.Close()
			return
		}
		l.wg.Add(1)
		go l.handshake(sock)
	}
}

// track records a socket in handshake; false once the listener closed.
func (l *listener) track(sock *net.UnixConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handshaking == nil {
		return false
	}
	l.handshaking[sock] = struct{}{}
	return true
}

func (l *listener) untrack(sock *net.UnixConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.handshaking, sock)
}

// handshake reads the CONNECT line and hands the connection to the worker.
// A host program that sends garbage, or asks while no device is active for
// connectTimeout, is disconnected.
func (l *listener) handshake(sock *net.UnixConn) {
	defer l.wg.Done()
	sock.SetReadDeadline(time.Now().Add(handshakeTimeout))
	port, err := readConnectLine(sock)
	sock.SetReadDeadline(time.Time{})
	if err != nil {
		l.untrack(sock)
		sock.Close()
		return
	}
	timer := time.NewTimer(connectTimeout)
	defer timer.Stop()
	select {
	case l.incoming <- incomingConn{sock: sock, port: port}:
		l.untrack(sock)
	case <-timer.C:
		l.untrack(sock)
		sock.Close()
	case <-l.closed:
		l.untrack(sock)
		sock.Close()
	}
}

// close stops accepting, disconnects host programs still in handshake,
// removes the socket file and waits for the goroutines.
func (l *listener) close() error {
	close(l.closed)
	err := l.ln.Close()
	l.mu.Lock()
	for sock := range l.handshaking {
		sock.Close()
	}
	l.handshaking = nil
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// errBadConnect reports a host program that did not start with a valid
// "CONNECT <port>\n" line.
var errBadConnect = errors.New("vsock: expected \"CONNECT <port>\\n\"")

// maxConnectLine bounds the CONNECT line ("CONNECT 4294967295\r\n" is 20).
const maxConnectLine = 32

// readConnectLine reads "CONNECT <port>\n" one byte at a time, so that no
// byte of the stream after the line is consumed.
func readConnectLine(r io.Reader) (uint32, error) {
	var line []byte
	var b [1]byte
	for {
		n, err := r.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			if len(line) > maxConnectLine {
				return 0, fmt.Errorf("%w: line longer than %d bytes", errBadConnect, maxConnectLine)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errBadConnect, err)
		}
	}
	return parseConnectLine(string(line))
}

// parseConnectLine parses a CONNECT line without its newline.
func parseConnectLine(line string) (uint32, error) {
	line = strings.TrimSuffix(line, "\r")
	arg, ok := strings.CutPrefix(line, "CONNECT ")
	if !ok {
		return 0, fmt.Errorf("%w: got %q", errBadConnect, line)
	}
	port, err := strconv.ParseUint(arg, 10, 32)
	if err != nil || arg == "" || arg[0] < '0' || arg[0] > '9' {
		return 0, fmt.Errorf("%w: bad port %q", errBadConnect, arg)
	}
	return uint32(port), nil
}
