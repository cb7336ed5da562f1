// Package serial emulates a 16550A UART, the PC serial port that a Linux
// guest uses as its console (ttyS0: ports 0x3f8-0x3ff, IRQ 4).
//
// The guest drives the UART through eight byte-wide registers (see
// registers.go): it writes characters to THR, reads them from RBR, and
// learns what happened from LSR, IIR and MSR. The emulation is complete
// enough for Linux's 8250 driver to identify a 16550A with working FIFOs and
// to run interrupt driven in both directions.
//
// Where the bytes go:
//
//   - Output: THR writes are queued and written to an io.Writer by a
//     goroutine, never by the vCPU thread. A slow host writer looks to the
//     guest like a busy line (THRE clear); see transmit.go.
//   - Input: the VMM offers host bytes with Enqueue, which accepts only what
//     fits in the receive FIFO, and waits on RoomForInput before offering
//     the rest, so input is never dropped. AttachInput runs that loop for an
//     io.Reader.
//
// Interrupts: the UART's interrupt output is edge triggered through a
// devices.Interrupt (a KVM irqfd feeding an I/O APIC pin). The device
// tracks its IRQ line level (some enabled condition pending, gated by
// MCR.OUT2 as on a PC) and triggers on each rise; see interrupts.go for why
// that is enough for Linux.
//
// Not emulated, because a byte stream to the host has no wire: baud rate
// (the divisor latch is stored and read back but has no effect), word
// format, parity, framing and break errors, and the receive trigger level.
package serial
