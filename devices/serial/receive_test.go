package serial

import "testing"

func TestReceiveDataAvailable(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	if n := h.uart.Enqueue([]byte("ls\r")); n != 3 {
		t.Fatalf("Enqueue accepted %d bytes, want 3", n)
	}
	h.wantEdges(1)
	h.wantIIR(iirFIFOsEnabled | iirReceivedData)
	var got []byte
	for h.in(regLineStatus)&lsrDataReady != 0 {
		got = append(got, h.in(regData))
	}
	if string(got) != "ls\r" {
		t.Fatalf("guest read %q, want %q", got, "ls\r")
	}
	h.wantIIR(iirFIFOsEnabled | iirNoInterrupt)

	// The line dropped, so the next byte is a new edge.
	h.uart.Enqueue([]byte("x"))
	h.wantEdges(2)
	// More data while the line is already up is no new edge.
	h.uart.Enqueue([]byte("y"))
	h.wantEdges(2)
}

func TestEnqueueBackpressure(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	input := make([]byte, ReceiveFIFOSize+10)
	for i := range input {
		input[i] = byte(i)
	}
	if n := h.uart.Enqueue(input); n != ReceiveFIFOSize {
		t.Fatalf("Enqueue accepted %d bytes, want %d (the FIFO size)", n, ReceiveFIFOSize)
	}
	if n := h.uart.Enqueue(input[ReceiveFIFOSize:]); n != 0 {
		t.Fatalf("Enqueue into a full FIFO accepted %d bytes", n)
	}
	select {
	case <-h.uart.RoomForInput():
		t.Fatal("room signalled before the guest read anything")
	default:
	}
	if b := h.in(regData); b != 0 {
		t.Fatalf("first byte = %d, want 0", b)
	}
	select {
	case <-h.uart.RoomForInput():
	default:
		t.Fatal("no room signal after the guest read a byte")
	}
	if n := h.uart.Enqueue(input[ReceiveFIFOSize:]); n != 1 {
		t.Fatalf("Enqueue after one read accepted %d bytes, want 1", n)
	}
	if lsr := h.in(regLineStatus); lsr&lsrOverrun != 0 {
		t.Fatal("host input set overrun: it must wait, not be dropped")
	}
	for i := 1; i <= ReceiveFIFOSize; i++ {
		if b := h.in(regData); b != byte(i) {
			t.Fatalf("byte %d = %d: FIFO order broken", i, b)
		}
	}
}

func TestReceiveWithoutFIFOHoldsOneByte(t *testing.T) {
	h := newHarness(t)
	if n := h.uart.Enqueue([]byte("ab")); n != 1 {
		t.Fatalf("Enqueue with FIFOs off accepted %d bytes, want 1", n)
	}
	h.wantIIR(iirNoInterrupt) // no FIFO bits, and no interrupt enabled
	if b := h.in(regData); b != 'a' {
		t.Fatalf("RBR = %q, want 'a'", b)
	}
}

func TestLoopbackOverrun(t *testing.T) {
	h := newHarness(t)
	h.out(regIntIdent, fcrEnableFIFO)
	h.out(regIntEnable, ierReceivedData|ierLineStatus)
	h.out(regModemControl, mcrLoopback|mcrOut2)

	if n := h.uart.Enqueue([]byte("host")); n != 0 {
		t.Fatalf("Enqueue in loopback accepted %d bytes; the receiver belongs to the transmitter", n)
	}
	for i := 0; i < ReceiveFIFOSize+1; i++ {
		h.out(regData, byte(i))
	}
	// Line status outranks received data.
	h.wantIIR(iirFIFOsEnabled | iirLineStatus)
	if lsr := h.in(regLineStatus); lsr&(lsrOverrun|lsrDataReady) != lsrOverrun|lsrDataReady {
		t.Fatalf("LSR = %#x, want OE and DR", lsr)
	}
	if lsr := h.in(regLineStatus); lsr&lsrOverrun != 0 {
		t.Fatal("reading LSR did not clear OE")
	}
	h.wantIIR(iirFIFOsEnabled | iirReceivedData)
	for i := 0; i < ReceiveFIFOSize; i++ {
		if b := h.in(regData); b != byte(i) {
			t.Fatalf("looped back byte %d = %d", i, b)
		}
	}
	h.wantEdges(0) // loopback disconnects OUT2 from the IRQ line

	h.out(regModemControl, mcrOut2)
	select {
	case <-h.uart.RoomForInput():
	default:
		t.Fatal("no room signal when loopback ended")
	}
	h.uart.Close()
	if h.output.String() != "" {
		t.Fatalf("loopback bytes reached the host: %q", h.output.String())
	}
}

func TestFIFOControlClearsReceive(t *testing.T) {
	h := newHarness(t)
	h.out(regIntIdent, fcrEnableFIFO)
	h.uart.Enqueue([]byte("stale"))
	h.out(regIntIdent, fcrEnableFIFO|fcrClearReceive)
	if h.in(regLineStatus)&lsrDataReady != 0 {
		t.Fatal("data ready after FCR cleared the receive FIFO")
	}
	h.uart.Enqueue([]byte("new"))
	h.out(regIntIdent, 0) // disabling the FIFOs empties them too
	if h.in(regLineStatus)&lsrDataReady != 0 {
		t.Fatal("data ready after the FIFOs were disabled")
	}
}
