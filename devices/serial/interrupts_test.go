package serial

import (
	"errors"
	"testing"
)

// TestIIRPriority raises all four conditions at once and checks that IIR
// reports them highest first as each is dealt with.
func TestIIRPriority(t *testing.T) {
	h := newHarness(t)
	h.out(regIntIdent, fcrEnableFIFO)
	// Overrun and data through loopback; the loopback round trip also
	// leaves modem status deltas behind.
	h.out(regModemControl, mcrLoopback)
	for i := 0; i <= ReceiveFIFOSize; i++ {
		h.out(regData, 'z')
	}
	h.out(regModemControl, mcrDTR|mcrRTS|mcrOut2)
	h.out(regIntEnable, ierReceivedData|ierLineStatus|ierTHREmpty|ierModemStatus)
	h.wantEdges(1)

	h.wantIIR(iirFIFOsEnabled | iirLineStatus)
	h.in(regLineStatus)
	h.wantIIR(iirFIFOsEnabled | iirReceivedData)
	for h.in(regLineStatus)&lsrDataReady != 0 {
		h.in(regData)
	}
	h.wantIIR(iirFIFOsEnabled | iirTHREmpty) // this read acknowledges THRE
	h.wantIIR(iirFIFOsEnabled | iirModemStatus)
	if msr := h.in(regModemStatus); msr&msrDeltaMask == 0 || msr&0xf0 != msrLinesDefault {
		t.Fatalf("MSR = %#x, want deltas and DCD|DSR|CTS", msr)
	}
	h.wantIIR(iirFIFOsEnabled | iirNoInterrupt)
	h.wantEdges(1) // the line stayed up throughout
}

func TestOUT2GatesTheIRQLine(t *testing.T) {
	h := newHarness(t)
	h.out(regIntEnable, ierReceivedData)
	h.uart.Enqueue([]byte("a"))
	h.wantEdges(0)
	h.wantIIR(iirReceivedData) // pending in the chip, but not on the line
	h.out(regModemControl, mcrOut2)
	h.wantEdges(1)
	h.out(regModemControl, 0)
	h.out(regModemControl, mcrOut2)
	h.wantEdges(2) // the line fell and rose again
}

func TestModemStatusInterrupt(t *testing.T) {
	h := newHarness(t)
	h.out(regModemControl, mcrOut2)
	h.out(regIntEnable, ierModemStatus)
	h.wantEdges(0)

	h.out(regModemControl, mcrOut2|mcrLoopback|mcrOut1) // RI on, DSR and CTS off: deltas
	h.out(regModemControl, mcrOut2)                     // RI's trailing edge
	h.wantEdges(1)
	msr := h.in(regModemStatus)
	if msr&(msrDeltaDSR|msrDeltaCTS|msrTrailingRI) != msrDeltaDSR|msrDeltaCTS|msrTrailingRI {
		t.Fatalf("MSR = %#x, want ΔDSR, ΔCTS and TERI", msr)
	}
	if msr := h.in(regModemStatus); msr&msrDeltaMask != 0 {
		t.Fatalf("MSR deltas not cleared by reading: %#x", msr)
	}
	h.wantIIR(iirNoInterrupt)
}

func TestTriggerErrorIsReported(t *testing.T) {
	irq := &countingInterrupt{err: errors.New("eventfd closed")}
	h := &harness{t: t, irq: irq, uart: New(irq, nil)}
	defer h.uart.Close()
	h.out(regModemControl, mcrOut2)
	h.out(regIntEnable, ierTHREmpty)
	if err := h.uart.Err(); err == nil {
		t.Fatal("Err() = nil after a failed Trigger")
	}
}

func TestWideAndOutOfRangeAccesses(t *testing.T) {
	h := newHarness(t)
	h.out(regScratch, 0x42)
	wide := make([]byte, 4)
	h.uart.Read(regScratch, wide)
	for _, b := range wide {
		if b != 0xff {
			t.Fatalf("4-byte read = %x, want all ones", wide)
		}
	}
	h.uart.Write(regScratch, []byte{1, 2})
	h.uart.Write(RegisterCount, []byte{1})
	one := []byte{0}
	h.uart.Read(1<<40, one)
	if one[0] != 0xff || h.in(regScratch) != 0x42 {
		t.Fatal("a wide or out-of-range access changed a register or read as something")
	}
}
