package serial

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// InputPump copies a host reader (typically the user's terminal) into a
// UART's receive FIFO, waiting for the guest to make room rather than
// dropping input. Create one with AttachInput.
type InputPump struct {
	uart     *UART
	r        io.Reader
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	err      error // written before done is closed
}

// AttachInput starts a goroutine that reads r and feeds what it reads to the
// guest through Enqueue, with backpressure. It stops when r reports an error
// or io.EOF, or after Close. Attach one pump per UART: the pump is the
// receiver of RoomForInput signals.
func (u *UART) AttachInput(r io.Reader) *InputPump {
	p := &InputPump{
		uart: u,
		r:    r,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go p.run()
	return p
}

// Close stops the pump and returns without waiting. Bytes not yet accepted
// by the UART are discarded. A pump blocked in r.Read cannot be interrupted
// (Go offers no general way to cancel a Read); it exits, discarding the
// data, as soon as that Read returns. Closing r, when the caller owns it,
// makes that immediate. Wait reports when the goroutine has exited.
func (p *InputPump) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
}

// Wait blocks until the pump's goroutine has exited and returns the error
// that ended it: nil for io.EOF or Close, otherwise the reader's error.
func (p *InputPump) Wait() error {
	<-p.done
	return p.err
}

func (p *InputPump) run() {
	defer close(p.done)
	buf := make([]byte, ReceiveFIFOSize)
	for {
		n, err := p.r.Read(buf)
		if p.stopped() {
			return
		}
		if n > 0 && !p.deliver(buf[:n]) {
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.err = fmt.Errorf("serial input: %w", err)
			}
			return
		}
	}
}

// deliver hands data to the UART, waiting for room as needed. It returns
// false if the pump was closed before all of data was accepted.
func (p *InputPump) deliver(data []byte) bool {
	for {
		data = data[p.uart.Enqueue(data):]
		if len(data) == 0 {
			return true
		}
		select {
		case <-p.uart.RoomForInput():
		case <-p.stop:
			return false
		}
	}
}

func (p *InputPump) stopped() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}
