package serial

// ReceiveFIFOSize is how many received bytes the UART holds before host
// input has to wait. A real 16550A has 16; a larger FIFO is invisible to
// Linux, which drains it while LSR.DR is set, and means fewer interrupts
// when a user pastes text.
const ReceiveFIFOSize = 64

// fifoEnabled reports whether the guest enabled the FIFOs through FCR.
func (u *UART) fifoEnabled() bool { return u.s.FIFOControl&fcrEnableFIFO != 0 }

// receiveCapacity is the number of bytes the receiver can hold: the FIFO,
// or just the receive buffer register when the FIFOs are off, as on an
// 8250.
func (u *UART) receiveCapacity() int {
	if u.fifoEnabled() {
		return ReceiveFIFOSize
	}
	return 1
}

// Enqueue offers bytes from the host (the user's terminal) to the guest and
// returns how many the UART accepted. It accepts as many as fit in the
// receive FIFO and none while the guest has the UART in loopback mode (the
// receiver is then wired to the transmitter). Bytes that were not accepted
// are the caller's to keep: wait for RoomForInput and offer them again.
// Nothing is ever dropped on this path, so a fast producer is slowed down to
// the guest's pace instead of losing input.
//
// "Received data available" is signalled as soon as the FIFO holds a byte,
// whatever the trigger level the guest set in FCR: that makes a trigger
// level of one byte, so the character-timeout indication a real 16550A uses
// for a partly filled FIFO is never needed.
func (u *UART) Enqueue(data []byte) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.s.ModemControl&mcrLoopback != 0 {
		return 0
	}
	n := min(len(data), u.receiveCapacity()-len(u.s.Receive))
	if n <= 0 {
		return 0
	}
	u.s.Receive = append(u.s.Receive, data[:n]...)
	u.updateInterrupt()
	return n
}

// RoomForInput returns a channel that receives a value whenever space may
// have opened in the receive FIFO (the guest read a byte, cleared the FIFO,
// or left loopback mode). At most one value is buffered, so a signal sent
// between a short Enqueue and the wait is not lost; a signal may also be
// stale, so always retry Enqueue rather than assume space. Only one
// goroutine should wait on it at a time (the InputPump does).
func (u *UART) RoomForInput() <-chan struct{} { return u.roomForInput }

func (u *UART) signalRoom() {
	select {
	case u.roomForInput <- struct{}{}:
	default: // a signal is already pending
	}
}

// receiveByte delivers a byte from the UART's own transmitter in loopback
// mode. A full FIFO loses the byte and flags an overrun, as hardware does.
func (u *UART) receiveByte(b uint8) {
	if len(u.s.Receive) >= u.receiveCapacity() {
		u.s.LineErrors |= lsrOverrun
		return
	}
	u.s.Receive = append(u.s.Receive, b)
}

// readReceiveBuffer implements a read of RBR: it pops the oldest byte. An
// empty FIFO reads as zero.
func (u *UART) readReceiveBuffer() uint8 {
	if len(u.s.Receive) == 0 {
		return 0
	}
	b := u.s.Receive[0]
	u.s.Receive = u.s.Receive[:copy(u.s.Receive, u.s.Receive[1:])]
	u.signalRoom()
	return b
}

// readLineStatus implements a read of LSR, which clears the latched error
// bits and with them the line status interrupt.
func (u *UART) readLineStatus() uint8 {
	v := u.s.LineErrors
	u.s.LineErrors = 0
	if len(u.s.Receive) > 0 {
		v |= lsrDataReady
	}
	if u.transmitterReady() {
		v |= lsrTHREmpty | lsrXmitEmpty
	}
	return v
}

// writeFIFOControl implements a write of FCR. Turning the FIFOs on or off
// empties them, as on real hardware. Clearing the transmit FIFO has no
// effect here: bytes in the transmit queue count as already sent (see
// transmit.go), so there is nothing left in a FIFO to discard.
func (u *UART) writeFIFOControl(v uint8) {
	const kept = fcrEnableFIFO | 0xc0 // the enable bit and the trigger level
	clearReceive := v&fcrClearReceive != 0 || (v^u.s.FIFOControl)&fcrEnableFIFO != 0
	u.s.FIFOControl = v & kept
	if clearReceive && len(u.s.Receive) > 0 {
		u.s.Receive = u.s.Receive[:0]
		u.signalRoom()
	}
}
