package serial

// pendingInterrupt returns the IIR code of the highest-priority interrupt
// condition that is both present and enabled in IER, or iirNoInterrupt.
// The priority order is fixed by the 16550: line status errors, then
// received data, then THR empty, then modem status.
func (u *UART) pendingInterrupt() uint8 {
	ier := u.s.InterruptEnable
	switch {
	case ier&ierLineStatus != 0 && u.s.LineErrors != 0:
		return iirLineStatus
	case ier&ierReceivedData != 0 && len(u.s.Receive) > 0:
		return iirReceivedData
	case ier&ierTHREmpty != 0 && u.s.THREInterrupt:
		return iirTHREmpty
	case ier&ierModemStatus != 0 && u.s.ModemDeltas != 0:
		return iirModemStatus
	}
	return iirNoInterrupt
}

// readInterruptIdent implements a read of IIR. Reading IIR acknowledges the
// THR-empty interrupt when that is the cause it reports; the other causes
// are cleared by dealing with them (reading LSR, RBR or MSR).
func (u *UART) readInterruptIdent() uint8 {
	id := u.pendingInterrupt()
	if id == iirTHREmpty {
		u.s.THREInterrupt = false
	}
	if u.fifoEnabled() {
		id |= iirFIFOsEnabled
	}
	return id
}

// writeInterruptEnable implements a write of IER. Enabling the THR-empty
// interrupt while the transmitter is ready raises it at once: this is how a
// driver starts transmitting (Linux sets IER.THRI and sends from the
// interrupt handler), and Linux's start-up test checks that a 16550 does it.
func (u *UART) writeInterruptEnable(v uint8) {
	before := u.s.InterruptEnable
	u.s.InterruptEnable = v & ierMask
	if before&ierTHREmpty == 0 && v&ierTHREmpty != 0 && u.transmitterReady() {
		u.s.THREInterrupt = true
	}
}

// interruptOutputEnabled reports whether the UART's interrupt reaches the
// IRQ line. On a PC the line is gated by the OUT2 modem control output, and
// in loopback mode the outputs are disconnected from the pins, so OUT2 is
// inactive there too. Linux sets OUT2 when it opens the port.
func (u *UART) interruptOutputEnabled() bool {
	return u.s.ModemControl&mcrOut2 != 0 && u.s.ModemControl&mcrLoopback == 0
}

// updateInterrupt recomputes the IRQ line after a state change and raises
// an edge when the line goes from inactive to active.
//
// The IRQ is edge triggered (ISA style), so only that transition interrupts
// the guest. While the line stays active no new edge is sent, however many
// conditions come and go; this is safe because Linux's 8250 interrupt
// handler keeps reading IIR until it reports no pending interrupt, which
// drops the line, so the next condition produces a fresh edge. Every path
// that changes state must call it with mu held.
func (u *UART) updateInterrupt() {
	high := u.interruptOutputEnabled() && u.pendingInterrupt() != iirNoInterrupt
	if high && !u.lineHigh && u.irq != nil {
		if err := u.irq.Trigger(); err != nil {
			u.noteHostErr(err)
		}
	}
	u.lineHigh = high
}
