package serial

// COM1 is where a PC has its first serial port and where Linux looks for
// ttyS0 without being told: ports COM1Port to COM1Port+RegisterCount-1,
// interrupt COM1IRQ.
const (
	COM1Port = 0x3f8
	COM1IRQ  = 4
)

// Register offsets from the UART's base port (0x3f8 for COM1). Several
// offsets hold two registers: which one an access reaches depends on its
// direction and on the divisor latch access bit (DLAB) in LCR.
const (
	regData         = 0 // read: RBR (receive buffer); write: THR (transmit holding); DLAB=1: DLL
	regIntEnable    = 1 // IER; DLAB=1: DLM
	regIntIdent     = 2 // read: IIR (interrupt identification); write: FCR (FIFO control)
	regLineControl  = 3 // LCR
	regModemControl = 4 // MCR
	regLineStatus   = 5 // LSR (read only)
	regModemStatus  = 6 // MSR (read only)
	regScratch      = 7 // SCR: a byte of storage with no effect

	// RegisterCount is how many consecutive ports the UART occupies.
	RegisterCount = 8
)

// IER: which conditions may interrupt the guest. Only the low four bits
// exist on a 16550A; Linux checks that the upper ones read back as zero to
// tell it apart from later chips.
const (
	ierReceivedData = 1 << 0 // ERBFI: received data available
	ierTHREmpty     = 1 << 1 // ETBEI: transmitter holding register empty
	ierLineStatus   = 1 << 2 // ELSI: receiver line status (errors)
	ierModemStatus  = 1 << 3 // EDSSI: modem status change
	ierMask         = 0x0f
)

// IIR: the highest-priority pending interrupt. Bit 0 set means "none". The
// top two bits read as 11 when the FIFOs are enabled: that is how Linux
// recognises a 16550A with working FIFOs.
const (
	iirNoInterrupt  = 0x01
	iirModemStatus  = 0x00 // lowest priority
	iirTHREmpty     = 0x02
	iirReceivedData = 0x04
	iirLineStatus   = 0x06 // highest priority
	iirFIFOsEnabled = 0xc0
)

// FCR: FIFO control (write only).
const (
	fcrEnableFIFO   = 1 << 0
	fcrClearReceive = 1 << 1
	fcrClearXmit    = 1 << 2
	// Bits 6-7 select the receive trigger level. It is stored but has no
	// effect; see receive.go.
)

// LCR: line control. Word length, stop bits and parity describe the wire
// format, which has no meaning for a byte stream to the host; only DLAB
// changes the UART's behaviour.
const (
	lcrDivisorLatch = 1 << 7 // DLAB: offsets 0 and 1 reach the divisor latch
)

// MCR: modem control outputs.
const (
	mcrDTR      = 1 << 0
	mcrRTS      = 1 << 1
	mcrOut1     = 1 << 2
	mcrOut2     = 1 << 3 // on a PC, gates the UART's interrupt onto the IRQ line
	mcrLoopback = 1 << 4 // internal loopback for self test
	mcrMask     = 0x1f
)

// LSR: line status. Parity, framing and break errors (bits 2-4) and the
// FIFO error bit (7) need a real wire; a byte stream from the host cannot
// produce them, so they always read as zero. Overrun can happen: in loopback
// mode the guest can send faster than it reads.
const (
	lsrDataReady = 1 << 0 // DR: at least one byte can be read from RBR
	lsrOverrun   = 1 << 1 // OE: a received byte was lost because the FIFO was full
	lsrTHREmpty  = 1 << 5 // THRE: the guest may write THR
	lsrXmitEmpty = 1 << 6 // TEMT: the transmitter is idle
	lsrErrors    = lsrOverrun
)

// MSR: modem status. The high nibble is the current state of the four input
// lines, the low nibble records changes since the guest last read MSR.
const (
	msrDeltaCTS     = 1 << 0
	msrDeltaDSR     = 1 << 1
	msrTrailingRI   = 1 << 2 // RI went from on to off
	msrDeltaDCD     = 1 << 3
	msrCTS          = 1 << 4
	msrDSR          = 1 << 5
	msrRI           = 1 << 6
	msrDCD          = 1 << 7
	msrDeltaMask    = 0x0f
	msrLinesDefault = msrDCD | msrDSR | msrCTS // a connected, ready terminal
)
