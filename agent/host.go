package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"
)

// Streams are the host ends of a command's standard streams and controls.
type Streams struct {
	Stdin   io.Reader // nil: the command's stdin is at EOF
	Stdout  io.Writer // nil: discarded
	Stderr  io.Writer // nil: discarded (with TTY, everything comes as stdout)
	Signals <-chan syscall.Signal
	Resize  <-chan Winsize
	// Started, if set, is called once the command's own program runs in
	// the guest (past its execve), before its exit is returned; never for
	// a command that could not start.
	Started func()
}

// ErrNoExit says the guest closed the stream before reporting an exit
// status: the agent or the VM died.
var ErrNoExit = errors.New("agent: the guest ended the session without an exit status")

// Run sends start over conn, relays the streams until the command ends and
// returns its exit. conn is the vsock stream to the agent.
func Run(conn io.ReadWriter, start Start, s Streams) (Exit, error) {
	start.Stdin = s.Stdin != nil
	payload, err := json.Marshal(start)
	if err != nil {
		return Exit{}, err
	}
	w := NewWriter(conn)
	if err := w.Write(FrameStart, payload); err != nil {
		return Exit{}, fmt.Errorf("agent: send command: %w", err)
	}
	done := make(chan struct{})
	defer close(done)
	if s.Stdin != nil {
		go func() {
			if w.Pipe(FrameStdin, s.Stdin) == nil {
				w.Write(FrameStdinClose, nil)
			}
		}()
	}
	go forwardControls(w, s, done)

	stdout, stderr := orDiscard(s.Stdout), orDiscard(s.Stderr)
	timeQueries := 0
	if start.Identity != nil && start.Identity.SyncClock {
		timeQueries = ClockSamples
	}
	r := NewReader(conn)
	started := false
	for {
		f, err := r.Read()
		if err == io.EOF {
			return Exit{}, ErrNoExit
		}
		if err != nil {
			return Exit{}, fmt.Errorf("agent: %w", err)
		}
		switch f.Type {
		case FrameStdout:
			stdout.Write(f.Payload)
		case FrameStderr:
			stderr.Write(f.Payload)
		case FrameStarted:
			if started {
				return Exit{}, errors.New("agent: the guest said twice that the command started")
			}
			started = true
			if s.Started != nil {
				s.Started()
			}
		case FrameExit:
			return DecodeExit(f.Payload)
		case FrameTimeQuery:
			// Answered at once, from this goroutine: the guest's
			// estimate is only as good as this reply is quick.
			if timeQueries == 0 {
				return Exit{}, errors.New("agent: the guest asked for the host's time more often than the session allows")
			}
			timeQueries--
			if err := w.Write(FrameTime, EncodeTime(time.Now().UnixNano())); err != nil {
				return Exit{}, fmt.Errorf("agent: send time: %w", err)
			}
		default:
			return Exit{}, fmt.Errorf("agent: unexpected %s frame from the guest", f.Type)
		}
	}
}

// forwardControls sends signals and window sizes until done.
func forwardControls(w *Writer, s Streams, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case sig, ok := <-s.Signals:
			if !ok {
				s.Signals = nil
				continue
			}
			if sig > 0 && sig < 65 {
				w.Write(FrameSignal, []byte{byte(sig)})
			}
		case ws, ok := <-s.Resize:
			if !ok {
				s.Resize = nil
				continue
			}
			w.Write(FrameResize, EncodeResize(ws))
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
