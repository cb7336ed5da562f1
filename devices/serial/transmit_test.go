package serial

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestTransmitReachesWriterInOrder(t *testing.T) {
	h := newHarness(t)
	msg := "Linux version 6.1\r\n"
	for i := 0; i < len(msg); i++ {
		h.out(regData, msg[i])
	}
	h.uart.Close()
	if got := h.output.String(); got != msg {
		t.Fatalf("output = %q, want %q", got, msg)
	}
}

// TestTHREInterruptCycle follows Linux's interrupt-driven transmit: enable
// THRI, take the interrupt, send a FIFO load, take the next interrupt, and
// finally disable THRI when the buffer is empty.
func TestTHREInterruptCycle(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	h.wantEdges(0)
	h.wantIIR(iirFIFOsEnabled | iirNoInterrupt)

	h.out(regIntEnable, ierReceivedData|ierLineStatus|ierTHREmpty) // start_tx
	h.wantEdges(1)

	// Interrupt handler: IIR reports THRE, which acknowledges it.
	h.wantIIR(iirFIFOsEnabled | iirTHREmpty)
	if h.in(regLineStatus)&lsrTHREmpty == 0 {
		t.Fatal("LSR.THRE clear while idle")
	}
	for i := 0; i < transmitFIFOSize; i++ {
		h.out(regData, 'a')
	}
	// The burst re-raised THRE once, without the line ever dropping
	// between bytes: one new edge, not sixteen.
	h.wantEdges(2)
	h.wantIIR(iirFIFOsEnabled | iirTHREmpty)
	h.wantIIR(iirFIFOsEnabled | iirNoInterrupt) // handler loop ends

	// stop_tx: nothing more to send.
	h.out(regIntEnable, ierReceivedData|ierLineStatus)
	h.wantIIR(iirFIFOsEnabled | iirNoInterrupt)
	h.wantEdges(2)
}

// TestTHREReraisedAfterConsoleWrite covers Linux's console write, which sets
// IER to 0, polls LSR and writes THR, then restores IER. If a tty transmit
// was in progress, restoring IER.THRI must interrupt again or the tty stalls.
func TestTHREReraisedAfterConsoleWrite(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	h.out(regIntEnable, ierReceivedData|ierLineStatus|ierTHREmpty)
	h.wantEdges(1)

	saved := h.in(regIntEnable)
	h.out(regIntEnable, 0)
	for _, c := range []byte("printk\n") {
		if h.in(regLineStatus)&lsrTHREmpty == 0 {
			t.Fatal("THRE clear during console write")
		}
		h.out(regData, c)
	}
	h.out(regIntEnable, saved)
	h.wantEdges(2)
	h.wantIIR(iirFIFOsEnabled | iirTHREmpty)
}

// blockingWriter holds every Write until the test releases it.
type blockingWriter struct {
	release chan struct{}
	out     syncBuffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.out.Write(p)
}

// TestSlowWriterLooksLikeBusyLine checks that a writer that does not keep up
// never blocks the vCPU: THRE clears when the queue is nearly full, and sets
// again, with an interrupt, when the writer catches up.
func TestSlowWriterLooksLikeBusyLine(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	irq := &countingInterrupt{}
	h := &harness{t: t, irq: irq, uart: New(irq, w)}
	h.openLikeLinux()
	h.out(regIntEnable, ierReceivedData|ierLineStatus|ierTHREmpty)
	h.wantIIR(iirFIFOsEnabled | iirTHREmpty)

	var sent strings.Builder
	for h.in(regLineStatus)&lsrTHREmpty != 0 {
		c := byte('a' + sent.Len()%26)
		h.out(regData, c)
		sent.WriteByte(c)
		if sent.Len() > TransmitQueueSize {
			t.Fatal("THRE never cleared although the writer is blocked")
		}
	}
	if want := TransmitQueueSize - transmitFIFOSize + 1; sent.Len() != want {
		t.Fatalf("THRE cleared after %d bytes, want %d", sent.Len(), want)
	}
	h.wantIIR(iirFIFOsEnabled | iirNoInterrupt) // no THRE interrupt while busy
	edges := irq.count()

	close(w.release)
	eventually(t, "THRE interrupt after the writer caught up", func() bool { return irq.count() > edges })
	if h.in(regLineStatus)&lsrTHREmpty == 0 {
		t.Fatal("THRE still clear after the writer caught up")
	}
	h.wantIIR(iirFIFOsEnabled | iirTHREmpty)
	h.uart.Close()
	if w.out.String() != sent.String() {
		t.Fatalf("writer got %d bytes, want the %d sent, in order", len(w.out.String()), sent.Len())
	}
}

// TestFullQueueDropsOverflow checks a guest that ignores THRE: what fits is
// kept, the rest is counted as dropped, and the vCPU never blocks.
func TestFullQueueDropsOverflow(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	irq := &countingInterrupt{}
	h := &harness{t: t, irq: irq, uart: New(irq, w)}
	for i := 0; i < TransmitQueueSize+5; i++ {
		h.out(regData, 'x')
	}
	if got := h.uart.State().OutputDropped; got != 5 {
		t.Fatalf("OutputDropped = %d, want 5", got)
	}
	close(w.release)
	h.uart.Close()
	if got := len(w.out.String()); got != TransmitQueueSize {
		t.Fatalf("writer got %d bytes, want %d", got, TransmitQueueSize)
	}
}

type failingWriter struct{}

func (failingWriter) Write(p []byte) (int, error) { return 0, errors.New("terminal gone") }

func TestWriterErrorDropsOutputAndIsReported(t *testing.T) {
	irq := &countingInterrupt{}
	h := &harness{t: t, irq: irq, uart: New(irq, failingWriter{})}
	for _, c := range []byte("lost") {
		h.out(regData, c)
	}
	h.uart.Close()
	if got := h.uart.State().OutputDropped; got != 4 {
		t.Fatalf("OutputDropped = %d, want 4", got)
	}
	if err := h.uart.Err(); err == nil || !strings.Contains(err.Error(), "terminal gone") {
		t.Fatalf("Err() = %v, want the writer's error", err)
	}
	if h.in(regLineStatus)&lsrTHREmpty == 0 {
		t.Fatal("a failing writer must not stall the guest")
	}
}

func TestDivisorLatch(t *testing.T) {
	h := newHarness(t)
	h.out(regIntEnable, ierReceivedData)
	h.out(regLineControl, lcrDivisorLatch|0x03)
	h.out(regData, 0x0c) // 9600 baud from a 1.8432 MHz clock
	h.out(regIntEnable, 0x00)
	if lo, hi := h.in(regData), h.in(regIntEnable); lo != 0x0c || hi != 0 {
		t.Fatalf("DLL, DLM = %#x, %#x; want 0x0c, 0", lo, hi)
	}
	h.out(regLineControl, 0x03)
	if got := h.in(regIntEnable); got != ierReceivedData {
		t.Fatalf("IER = %#x after the divisor latch was written, want it untouched", got)
	}
	h.uart.Close()
	if h.output.String() != "" {
		t.Fatalf("divisor writes reached the output: %q", h.output.String())
	}
	if s := h.uart.State(); s.DivisorLatchLow != 0x0c || s.DivisorLatchHigh != 0 {
		t.Fatalf("state divisor = %#x/%#x", s.DivisorLatchLow, s.DivisorLatchHigh)
	}
}

// countingWriter counts the host writes the transmitter makes.
type countingWriter struct {
	syncBuffer
	writes atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	return w.syncBuffer.Write(p)
}

// TestBurstIsOneHostWrite: a burst of output reaches the host in one write
// per transmitGather at most, not a write (and a wake-up of the
// transmitter) per byte; nothing is lost or reordered on the way.
func TestBurstIsOneHostWrite(t *testing.T) {
	w := &countingWriter{}
	h := &harness{t: t, irq: &countingInterrupt{}, uart: New(&countingInterrupt{}, w)}
	h.openLikeLinux()
	var sent strings.Builder
	began := time.Now()
	for i := 0; i < 3000; i++ {
		c := byte('a' + i%26)
		if i%80 == 79 {
			c = '\n'
		}
		h.out(regData, c)
		sent.WriteByte(c)
	}
	elapsed := time.Since(began)
	h.uart.Close()
	if w.String() != sent.String() {
		t.Fatalf("writer got %d bytes, want the %d sent, in order", len(w.String()), sent.Len())
	}
	// Every write but Close's last one waited transmitGather after a kick.
	if most := int64(elapsed/transmitGather) + 2; w.writes.Load() > most {
		t.Fatalf("%d host writes for %d bytes written in %v, want at most %d (one per %v)", w.writes.Load(), sent.Len(), elapsed, most, transmitGather)
	}
	t.Logf("%d bytes in %v: %d host writes", sent.Len(), elapsed, w.writes.Load())
}
