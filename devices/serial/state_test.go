package serial

import (
	"reflect"
	"testing"
)

func TestStateRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	h.out(regLineControl, lcrDivisorLatch|0x03)
	h.out(regData, 0x01)
	h.out(regIntEnable, 0x00)
	h.out(regLineControl, 0x03)
	h.out(regScratch, 0x77)
	h.uart.Enqueue([]byte("typed ahead"))
	h.out(regIntEnable, ierReceivedData|ierLineStatus|ierTHREmpty)
	saved := h.uart.State()

	// Mutating the copy must not reach the UART.
	saved.Receive[0] = 'X'
	if h.in(regData) != 't' {
		t.Fatal("State shares its Receive slice with the UART")
	}
	saved.Receive[0] = 't'

	irq := &countingInterrupt{}
	restored := &harness{t: t, irq: irq, output: &syncBuffer{}}
	restored.uart = New(irq, restored.output)
	t.Cleanup(restored.uart.Close)
	if err := restored.uart.Restore(saved); err != nil {
		t.Fatal(err)
	}
	if got := restored.uart.State(); !reflect.DeepEqual(got, saved) {
		t.Fatalf("state after restore:\n%+v\nwant\n%+v", got, saved)
	}
	restored.wantEdges(1) // a pending interrupt is announced again
	restored.wantIIR(iirFIFOsEnabled | iirReceivedData)
	var got []byte
	for restored.in(regLineStatus)&lsrDataReady != 0 {
		got = append(got, restored.in(regData))
	}
	if string(got) != "typed ahead" {
		t.Fatalf("restored FIFO read %q", got)
	}
	if restored.in(regScratch) != 0x77 {
		t.Fatal("scratch register lost")
	}
}

func TestRestoreResumesPendingOutput(t *testing.T) {
	h := newHarness(t)
	if err := h.uart.Restore(State{Transmit: []byte("queued before the snapshot")}); err != nil {
		t.Fatal(err)
	}
	h.uart.Close()
	if got := h.output.String(); got != "queued before the snapshot" {
		t.Fatalf("output = %q", got)
	}
}

func TestRestoreRejectsOversizedQueues(t *testing.T) {
	h := newHarness(t)
	if err := h.uart.Restore(State{Receive: make([]byte, ReceiveFIFOSize+1)}); err == nil {
		t.Fatal("Restore accepted a receive FIFO larger than the UART's")
	}
	if err := h.uart.Restore(State{Transmit: make([]byte, TransmitQueueSize+1)}); err == nil {
		t.Fatal("Restore accepted a transmit queue larger than the UART's")
	}
}
