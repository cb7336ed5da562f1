package serial

// modemLines returns the current state of the four modem input lines as
// MSR's high nibble. In normal operation the UART looks connected to a
// terminal that is present and ready (DCD, DSR and CTS on). In loopback
// mode the inputs are wired internally to the modem control outputs, which
// is what Linux's probe checks: it sets RTS and OUT2 and expects to read
// CTS and DCD.
func (u *UART) modemLines() uint8 {
	mcr := u.s.ModemControl
	if mcr&mcrLoopback == 0 {
		return msrLinesDefault
	}
	var lines uint8
	if mcr&mcrRTS != 0 {
		lines |= msrCTS
	}
	if mcr&mcrDTR != 0 {
		lines |= msrDSR
	}
	if mcr&mcrOut1 != 0 {
		lines |= msrRI
	}
	if mcr&mcrOut2 != 0 {
		lines |= msrDCD
	}
	return lines
}

// modemDeltas returns the MSR delta bits that a change of the modem lines
// from before to after sets. Ring indicator reports only its trailing edge.
func modemDeltas(before, after uint8) uint8 {
	changed := before ^ after
	var d uint8
	if changed&msrCTS != 0 {
		d |= msrDeltaCTS
	}
	if changed&msrDSR != 0 {
		d |= msrDeltaDSR
	}
	if changed&msrDCD != 0 {
		d |= msrDeltaDCD
	}
	if before&msrRI != 0 && after&msrRI == 0 {
		d |= msrTrailingRI
	}
	return d
}

// writeModemControl implements a write of MCR.
func (u *UART) writeModemControl(v uint8) {
	wasLoopback := u.s.ModemControl&mcrLoopback != 0
	before := u.modemLines()
	u.s.ModemControl = v & mcrMask
	u.s.ModemDeltas |= modemDeltas(before, u.modemLines())
	if wasLoopback && u.s.ModemControl&mcrLoopback == 0 {
		u.signalRoom() // host input was held back during loopback
	}
}

// readModemStatus implements a read of MSR, which clears the delta bits and
// with them the modem status interrupt.
func (u *UART) readModemStatus() uint8 {
	v := u.modemLines() | u.s.ModemDeltas
	u.s.ModemDeltas = 0
	return v
}
