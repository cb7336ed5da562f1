package serial

import (
	"io"
	"sync"

	"github.com/smolvm/smol/devices"
)

// UART is an emulated 16550A. It implements devices.Device for the eight
// ports starting at its base port.
//
// Locking: mu guards s and the fields marked below. vCPU threads (Read,
// Write), the host input side (Enqueue) and the transmitter goroutine all
// take it; none of them blocks while holding it.
type UART struct {
	mu sync.Mutex
	s  State // guarded by mu

	irq      devices.Interrupt
	lineHigh bool  // guarded by mu: the IRQ line as last driven, for edge detection
	hostErr  error // guarded by mu: first host-side failure, see Err

	// roomForInput receives a value (without blocking; at most one is
	// buffered) whenever space may have opened in the receive FIFO.
	roomForInput chan struct{}

	// The transmitter goroutine copies s.Transmit to out.
	out                io.Writer
	transmitGeneration uint64 // guarded by mu: bumped by Restore
	kick               chan struct{}
	stop               chan struct{}
	stopOnce           sync.Once
	transmitterDone    chan struct{}
}

// New returns a UART in its power-on state that raises irq and sends the
// guest's output to out (nil discards it). It starts the goroutine that
// writes to out; Close stops it.
func New(irq devices.Interrupt, out io.Writer) *UART {
	if out == nil {
		out = io.Discard
	}
	u := &UART{
		irq:             irq,
		roomForInput:    make(chan struct{}, 1),
		out:             out,
		kick:            make(chan struct{}, 1),
		stop:            make(chan struct{}),
		transmitterDone: make(chan struct{}),
	}
	u.s.Receive = make([]byte, 0, ReceiveFIFOSize)
	u.s.Transmit = make([]byte, 0, TransmitQueueSize)
	go u.transmitter()
	return u
}

// Close stops the transmitter goroutine after it has handed the remaining
// output to the writer. It waits for that last write: a writer that never
// returns makes Close never return, so close such a writer first. Close does
// not stop input pumps (see InputPump.Close).
func (u *UART) Close() {
	u.stopOnce.Do(func() { close(u.stop) })
	<-u.transmitterDone
}

// Err returns the first host-side failure: an interrupt that could not be
// raised or output the host writer refused. The UART keeps working after
// one; the VMM may log it.
func (u *UART) Err() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hostErr
}

func (u *UART) noteHostErr(err error) {
	if u.hostErr == nil {
		u.hostErr = err
	}
}

// Read implements devices.Device. Only single-byte accesses exist on a
// 16550; wider ones, and offsets past the eight registers, read as all ones
// like an unclaimed port.
func (u *UART) Read(offset uint64, data []byte) {
	if len(data) != 1 || offset >= RegisterCount {
		for i := range data {
			data[i] = 0xff
		}
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	data[0] = u.readRegister(offset)
	u.updateInterrupt()
}

// Write implements devices.Device. Accesses that are not single bytes to
// one of the eight registers are ignored.
func (u *UART) Write(offset uint64, data []byte) {
	if len(data) != 1 || offset >= RegisterCount {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.writeRegister(offset, data[0])
	u.updateInterrupt()
}

func (u *UART) divisorLatch() bool { return u.s.LineControl&lcrDivisorLatch != 0 }

// readRegister returns the register at offset, applying the side effects a
// read has on real hardware (popping RBR, acknowledging interrupts).
func (u *UART) readRegister(offset uint64) uint8 {
	switch offset {
	case regData:
		if u.divisorLatch() {
			return u.s.DivisorLatchLow
		}
		return u.readReceiveBuffer()
	case regIntEnable:
		if u.divisorLatch() {
			return u.s.DivisorLatchHigh
		}
		return u.s.InterruptEnable
	case regIntIdent:
		return u.readInterruptIdent()
	case regLineControl:
		return u.s.LineControl
	case regModemControl:
		return u.s.ModemControl
	case regLineStatus:
		return u.readLineStatus()
	case regModemStatus:
		return u.readModemStatus()
	default: // regScratch
		return u.s.Scratch
	}
}

func (u *UART) writeRegister(offset uint64, v uint8) {
	switch offset {
	case regData:
		if u.divisorLatch() {
			u.s.DivisorLatchLow = v
			return
		}
		u.writeTransmitHolding(v)
	case regIntEnable:
		if u.divisorLatch() {
			u.s.DivisorLatchHigh = v
			return
		}
		u.writeInterruptEnable(v)
	case regIntIdent:
		u.writeFIFOControl(v)
	case regLineControl:
		u.s.LineControl = v
	case regModemControl:
		u.writeModemControl(v)
	case regLineStatus, regModemStatus:
		// Read-only status registers; writes reach a factory test mode on
		// some chips and do nothing useful. Ignored.
	default: // regScratch
		u.s.Scratch = v
	}
}
