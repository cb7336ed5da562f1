package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// FrameType says what a frame carries.
type FrameType uint8

// Frame types. Host to guest: Start, Stdin, StdinClose, Signal, Resize,
// Time. Guest to host: Started, Stdout, Stderr, Exit, TimeQuery.
const (
	FrameStart      FrameType = 1  // JSON Start
	FrameStdin      FrameType = 2  // bytes for the command's stdin
	FrameStdinClose FrameType = 3  // stdin reached EOF
	FrameSignal     FrameType = 4  // one byte: the signal number
	FrameResize     FrameType = 5  // rows, cols: two big-endian uint16
	FrameStdout     FrameType = 6  // bytes the command wrote to stdout (or its terminal)
	FrameStderr     FrameType = 7  // bytes the command wrote to stderr
	FrameExit       FrameType = 8  // JSON Exit; the last frame of a stream
	FrameTimeQuery  FrameType = 9  // empty: what time is it on the host? (Identity.SyncClock)
	FrameTime       FrameType = 10 // the host's wall clock: Unix nanoseconds, big-endian int64
	FrameStarted    FrameType = 11 // empty: the command's own program runs (past its execve)
)

func (t FrameType) String() string {
	names := [...]string{"", "start", "stdin", "stdin-close", "signal", "resize", "stdout", "stderr", "exit", "time-query", "time", "started"}
	if int(t) < len(names) && t != 0 {
		return names[t]
	}
	return fmt.Sprintf("frame-type-%d", uint8(t))
}

// MaxFrame bounds a frame's payload. Data is sent in pieces of at most
// this size, so a larger length can only come from a broken or hostile
// peer.
const MaxFrame = 1 << 20

// ErrFrameTooLarge reports a frame whose length exceeds MaxFrame.
var ErrFrameTooLarge = errors.New("agent: frame larger than the protocol allows")

// Frame is one message.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// Reader reads frames from a stream.
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader for r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Read returns the next frame. Its payload is freshly allocated. A stream
// that ends between frames gives io.EOF; one that ends inside a frame gives
// io.ErrUnexpectedEOF.
func (r *Reader) Read() (Frame, error) {
	var header [5]byte
	if _, err := io.ReadFull(r.r, header[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(header[1:])
	if n > MaxFrame {
		return Frame{}, fmt.Errorf("%w (%s frame of %d bytes)", ErrFrameTooLarge, FrameType(header[0]), n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r.r, payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{Type: FrameType(header[0]), Payload: payload}, nil
}

// Writer writes frames to a stream. It is safe for concurrent use: stdout,
// stderr and control frames come from different goroutines.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer for w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write sends one frame, splitting data frames larger than MaxFrame.
func (w *Writer) Write(t FrameType, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		chunk := payload
		if len(chunk) > MaxFrame {
			chunk = chunk[:MaxFrame]
		}
		var header [5]byte
		header[0] = byte(t)
		binary.BigEndian.PutUint32(header[1:], uint32(len(chunk)))
		// One write per frame where possible: each vsock write is a packet.
		buf := make([]byte, 0, len(header)+len(chunk))
		buf = append(append(buf, header[:]...), chunk...)
		if _, err := w.w.Write(buf); err != nil {
			return err
		}
		payload = payload[len(chunk):]
		if len(payload) == 0 {
			return nil
		}
	}
}

// Pipe copies r to the stream as frames of type t until r ends. It returns
// nil at EOF.
func (w *Writer) Pipe(t FrameType, r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := w.Write(t, buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
