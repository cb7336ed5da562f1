package serial

import (
	"fmt"
	"time"
)

// Output path. The guest writes THR one byte per vCPU exit; the bytes go
// into the transmit queue and a transmitter goroutine hands them to the host
// writer (the user's terminal) in batches. A vCPU thread therefore never
// calls the writer, and a slow or stuck writer cannot block a vCPU.
//
// Instead, a writer that falls behind looks to the guest like a busy serial
// line: while fewer than a FIFO's worth of bytes fit in the queue, LSR.THRE
// reads as clear and no THR-empty interrupt is raised, so the guest's
// interrupt-driven tty output waits, exactly as it would on a slow wire.
// When the writer catches up, THRE sets again and the interrupt fires.
// Linux's polled console output gives up waiting after about 10 ms per
// character and writes anyway; such bytes are kept while there is any room
// and otherwise dropped (counted in State.OutputDropped). The same happens
// to output the writer fails to take: it is dropped so that a vanished
// terminal never stalls the guest.
//
// Bytes count as transmitted once they are in the queue: THRE and TEMT read
// as set immediately after a write, which keeps the guest from spinning on
// LSR for every character.

// TransmitQueueSize bounds the output buffered between the guest and the
// host writer.
const TransmitQueueSize = 4096

// transmitFIFOSize is the transmit FIFO of a 16550A. Linux writes this many
// bytes to THR for each THR-empty interrupt without checking LSR in between,
// so THRE is only reported while that many fit in the queue.
const transmitFIFOSize = 16

// transmitterReady reports whether THR counts as empty: a full FIFO load
// fits in the transmit queue.
func (u *UART) transmitterReady() bool {
	return len(u.s.Transmit)+transmitFIFOSize <= TransmitQueueSize
}

// writeTransmitHolding implements a write of THR: the byte is sent (or, in
// loopback mode, received) and THR is empty again right away. Writing THR
// acknowledges a pending THR-empty interrupt; the byte moving on raises the
// next one. Both happen under one lock, so the IRQ line does not drop and
// rise again for every byte of a burst.
func (u *UART) writeTransmitHolding(b uint8) {
	u.s.THREInterrupt = false
	switch {
	case u.s.ModemControl&mcrLoopback != 0:
		u.receiveByte(b)
	case len(u.s.Transmit) < TransmitQueueSize:
		u.s.Transmit = append(u.s.Transmit, b)
		u.kickTransmitter()
	default:
		u.s.OutputDropped++
	}
	if u.transmitterReady() {
		u.s.THREInterrupt = true
	}
}

func (u *UART) kickTransmitter() {
	if len(u.s.Transmit) == 0 {
		return
	}
	select {
	case u.kick <- struct{}{}:
	default: // the transmitter has a wake-up pending
	}
}

// transmitGather is how long the transmitter lets output gather after the
// first byte of a burst before it writes. Waking it costs the vCPU thread
// a wake-up of another thread (a futex, on a busy host an inter-processor
// interrupt), which per byte was most of what a console flood cost in the
// nested test box (BENCHMARKS.md, "The serial flood"); a millisecond makes
// it one wake-up and one host write per burst, and is not a delay anyone
// typing sees. The queue still holds a guest writing faster than 4 MB/s:
// THRE then reads clear, as on a slow wire.
const transmitGather = time.Millisecond

// transmitter is the goroutine that writes the transmit queue to the host.
// It runs until Close and writes what is left before exiting.
func (u *UART) transmitter() {
	defer close(u.transmitterDone)
	buf := make([]byte, TransmitQueueSize)
	gather := time.NewTimer(0)
	<-gather.C
	for {
		select {
		case <-u.kick:
			gather.Reset(transmitGather)
			select {
			case <-gather.C:
			case <-u.stop:
				u.sendQueued(buf)
				return
			}
			// One write takes the whole queue. Output queued from here
			// on kicks again and waits for the next burst's write.
			select {
			case <-u.kick:
			default:
			}
			u.sendQueued(buf)
		case <-u.stop:
			u.sendQueued(buf)
			return
		}
	}
}

// sendQueued writes the queued bytes to the host writer and then removes
// them from the queue. They stay in the queue while the write is in progress
// so that the queue, and THRE, reflect how far the host really is. It
// reports whether there was anything to send.
func (u *UART) sendQueued(buf []byte) bool {
	u.mu.Lock()
	n := copy(buf, u.s.Transmit)
	generation := u.transmitGeneration
	u.mu.Unlock()
	if n == 0 {
		return false
	}

	written, err := u.out.Write(buf[:n])

	u.mu.Lock()
	defer u.mu.Unlock()
	if generation != u.transmitGeneration {
		return true // Restore replaced the queue while we were writing
	}
	if err != nil {
		u.noteHostErr(fmt.Errorf("serial output: %w", err))
	}
	if written < 0 || written > n {
		written = 0 // a broken writer: count everything as lost
	}
	u.s.OutputDropped += uint64(n - written)
	wasReady := u.transmitterReady()
	u.s.Transmit = u.s.Transmit[:copy(u.s.Transmit, u.s.Transmit[n:])]
	if !wasReady && u.transmitterReady() {
		u.s.THREInterrupt = true // the line caught up: THR is empty again
	}
	u.updateInterrupt()
	return true
}
