package serial

import "testing"

// TestLinuxProbeIdentifies16550A replays the register accesses of Linux's
// 8250 autoconfig() and checks each answer leads it to "16550A".
func TestLinuxProbeIdentifies16550A(t *testing.T) {
	h := newHarness(t)

	// IER must hold the low nibble and nothing else.
	h.out(regIntEnable, 0)
	if got := h.in(regIntEnable) & 0x0f; got != 0 {
		t.Fatalf("IER after writing 0 = %#x", got)
	}
	h.out(regIntEnable, 0x0f)
	if got := h.in(regIntEnable) & 0x0f; got != 0x0f {
		t.Fatalf("IER after writing 0x0f = %#x, want 0x0f", got)
	}
	h.out(regIntEnable, 0)

	// Loopback test: RTS and OUT2 looped back must read as CTS and DCD.
	savedMCR := h.in(regModemControl)
	h.out(regModemControl, mcrLoopback|mcrOut2|mcrRTS)
	if got := h.in(regModemStatus) & 0xf0; got != 0x90 {
		t.Fatalf("MSR lines in loopback = %#x, want 0x90", got)
	}
	h.out(regModemControl, savedMCR)

	// EFR probes: with LCR=0xBF offset 2 must not read as zero (no EFR).
	h.out(regLineControl, 0xbf)
	if h.in(regIntIdent) == 0 {
		t.Fatal("offset 2 reads 0 with LCR=0xBF: Linux would take this for an EFR (16650)")
	}
	h.out(regLineControl, 0)

	// FIFO detection: enabling the FIFOs sets both top bits of IIR.
	h.out(regIntIdent, fcrEnableFIFO)
	if got := h.in(regIntIdent) >> 6; got != 3 {
		t.Fatalf("IIR>>6 with FIFO enabled = %d, want 3 (16550A)", got)
	}

	// autoconfig_16550a: EFR at LCR=0x80, then 0xBF, must read non-zero.
	for _, lcr := range []uint8{0x80, 0xbf} {
		h.out(regLineControl, lcr)
		if h.in(regIntIdent) == 0 {
			t.Fatalf("offset 2 reads 0 with LCR=%#x: Linux would detect an EFR", lcr)
		}
	}
	// National SuperIO check: offset 2 with LCR=0xE0 must not follow MCR.LOOP.
	h.out(regLineControl, 0)
	mcr := h.in(regModemControl)
	h.out(regLineControl, 0xe0)
	excr1 := h.in(regIntIdent)
	if (excr1^mcr)&mcrLoopback == 0 {
		h.out(regLineControl, 0)
		h.out(regModemControl, mcr^mcrLoopback)
		h.out(regLineControl, 0xe0)
		excr1 = h.in(regIntIdent)
		h.out(regLineControl, 0)
		h.out(regModemControl, mcr)
		if (excr1^mcr)&mcrLoopback != 0 {
			t.Fatal("offset 2 tracks MCR.LOOP: Linux would detect an NS16550 SuperIO")
		}
	}
	// TI16750 check: IIR bit 5 must never set.
	h.out(regLineControl, 0)
	h.out(regIntIdent, fcrEnableFIFO|0x20)
	status1 := h.in(regIntIdent) >> 5
	h.out(regIntIdent, fcrEnableFIFO)
	h.out(regLineControl, 0x80)
	h.out(regIntIdent, fcrEnableFIFO|0x20)
	status2 := h.in(regIntIdent) >> 5
	h.out(regIntIdent, fcrEnableFIFO)
	h.out(regLineControl, 0)
	if status1 != 6 || status2 != 6 {
		t.Fatalf("IIR>>5 = %d, %d; want 6, 6 (a 16750 would give 6, 7)", status1, status2)
	}
	// XScale check: IER bit 6 must not stick.
	h.out(regIntEnable, 0x40)
	if h.in(regIntEnable)&0x40 != 0 {
		t.Fatal("IER bit 6 sticks: Linux would detect an XScale UART")
	}
	h.out(regIntEnable, 0)

	// Scratch register.
	for _, v := range []uint8{0xa5, 0x5a} {
		h.out(regScratch, v)
		if got := h.in(regScratch); got != v {
			t.Fatalf("SCR = %#x, want %#x", got, v)
		}
	}

	if got := h.in(regLineStatus); got != lsrTHREmpty|lsrXmitEmpty {
		t.Fatalf("idle LSR = %#x, want THRE|TEMT", got)
	}
	h.wantEdges(0) // OUT2 was never set: nothing may reach the IRQ line
}

// TestLinuxStartupTHRETests replays the two THRE checks of
// serial8250_do_startup. Failing them makes Linux flag UART_BUG_THRE or
// UART_BUG_TXEN and fall back to polling with a timer.
func TestLinuxStartupTHRETests(t *testing.T) {
	h := newHarness(t)
	h.out(regIntIdent, fcrEnableFIFO)

	// UART_BUG_THRE: THRI must be re-asserted each time it is enabled.
	h.out(regIntEnable, ierTHREmpty)
	iir1 := h.in(regIntIdent)
	h.out(regIntEnable, 0)
	h.out(regIntEnable, ierTHREmpty)
	iir2 := h.in(regIntIdent)
	h.out(regIntEnable, 0)
	if iir1&iirNoInterrupt != 0 || iir2&iirNoInterrupt != 0 {
		t.Fatalf("IIR after enabling THRI = %#x then %#x; both must report an interrupt", iir1, iir2)
	}

	// UART_BUG_TXEN: with OUT2 set, enabling THRI interrupts at once.
	h.out(regModemControl, mcrDTR|mcrRTS|mcrOut2)
	h.out(regIntEnable, ierTHREmpty)
	lsr := h.in(regLineStatus)
	iir := h.in(regIntIdent)
	h.out(regIntEnable, 0)
	if lsr&lsrXmitEmpty == 0 || iir&iirNoInterrupt != 0 {
		t.Fatalf("LSR = %#x, IIR = %#x: want TEMT and a pending interrupt", lsr, iir)
	}
	h.wantEdges(1)
}
