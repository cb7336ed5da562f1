package serial

import "fmt"

// State is everything a UART holds that the guest can observe: the
// registers, the queued bytes and the pending interrupt conditions. It is a
// plain value so that a snapshot can save it and a new UART can carry on
// from it.
//
// Some registers are not stored because they are computed from the rest:
// IIR (from IER and the pending conditions), LSR's DR, THRE and TEMT bits
// (from the queues) and MSR's line bits (from MCR). See the methods in
// interrupts.go, receive.go, transmit.go and modem.go.
type State struct {
	DivisorLatchLow  uint8 // DLL
	DivisorLatchHigh uint8 // DLM
	InterruptEnable  uint8 // IER, low four bits
	FIFOControl      uint8 // the FIFO enable and trigger level bits last written to FCR
	LineControl      uint8 // LCR
	ModemControl     uint8 // MCR, low five bits
	LineErrors       uint8 // LSR error bits, latched until the guest reads LSR
	ModemDeltas      uint8 // MSR low nibble: line changes since the guest last read MSR
	Scratch          uint8 // SCR

	// THREInterrupt is the "transmitter holding register empty" interrupt
	// condition. Unlike the other conditions it is an event, not a level:
	// the guest acknowledges it by reading IIR while it is the reported
	// cause, or by writing THR.
	THREInterrupt bool

	// Receive is the receive FIFO, oldest byte first.
	Receive []byte
	// Transmit holds bytes the guest has sent that the host writer has not
	// yet accepted, oldest first.
	Transmit []byte
	// OutputDropped counts bytes lost on the way out: written by the guest
	// while the transmit queue was full, or refused by the host writer.
	OutputDropped uint64
}

// State returns a copy of the UART's current state.
func (u *UART) State() State {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.s
	s.Receive = append([]byte(nil), u.s.Receive...)
	s.Transmit = append([]byte(nil), u.s.Transmit...)
	return s
}

// Restore replaces the UART's state with s, typically on a fresh UART before
// the guest runs. If the restored state has an interrupt pending, Restore
// raises the interrupt once more: the guest may not have seen the edge
// before the snapshot was taken, and a repeated edge is harmless (the
// driver reads IIR and finds the cause) while a lost one would stall it.
// The VMM therefore calls Restore after the interrupt controller is restored
// and the irqfd is connected.
func (u *UART) Restore(s State) error {
	if len(s.Receive) > ReceiveFIFOSize {
		return fmt.Errorf("restore serial state: receive FIFO holds %d bytes, more than its %d", len(s.Receive), ReceiveFIFOSize)
	}
	if len(s.Transmit) > TransmitQueueSize {
		return fmt.Errorf("restore serial state: transmit queue holds %d bytes, more than its %d", len(s.Transmit), TransmitQueueSize)
	}
	s.InterruptEnable &= ierMask
	s.ModemControl &= mcrMask
	s.LineErrors &= lsrErrors
	s.ModemDeltas &= msrDeltaMask
	s.Receive = append(make([]byte, 0, ReceiveFIFOSize), s.Receive...)
	s.Transmit = append(make([]byte, 0, TransmitQueueSize), s.Transmit...)

	u.mu.Lock()
	defer u.mu.Unlock()
	u.s = s
	u.transmitGeneration++ // bytes the transmitter is writing now belong to the old state
	u.lineHigh = false     // re-announce a pending interrupt
	u.updateInterrupt()
	u.kickTransmitter()
	u.signalRoom()
	return nil
}
