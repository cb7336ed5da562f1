package serial

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/smolvm/smol/devices"
	"github.com/smolvm/smol/internal/syncbuf"
)

var _ devices.Device = (*UART)(nil)

// countingInterrupt is a devices.Interrupt that counts edges.
type countingInterrupt struct {
	edges atomic.Int64
	err   error
}

func (c *countingInterrupt) Trigger() error {
	c.edges.Add(1)
	return c.err
}

func (c *countingInterrupt) count() int64 { return c.edges.Load() }

// syncBuffer is an io.Writer safe for the transmitter goroutine and the test
// to share.
type syncBuffer = syncbuf.Buffer

// harness is a UART with a guest's-eye view: in and out are the guest's
// INB and OUTB on the UART's ports.
type harness struct {
	t      *testing.T
	uart   *UART
	irq    *countingInterrupt
	output *syncBuffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, irq: &countingInterrupt{}, output: &syncBuffer{}}
	h.uart = New(h.irq, h.output)
	t.Cleanup(h.uart.Close)
	return h
}

func (h *harness) in(offset uint64) uint8 {
	var b [1]byte
	h.uart.Read(offset, b[:])
	return b[0]
}

func (h *harness) out(offset uint64, v uint8) {
	h.uart.Write(offset, []byte{v})
}

// openLikeLinux puts the UART in the state Linux's 8250 driver leaves it in
// after opening the port: FIFOs on, 8N1, OUT2 (interrupts routed), and
// receive interrupts enabled.
func (h *harness) openLikeLinux() {
	h.out(regIntIdent, fcrEnableFIFO|fcrClearReceive|fcrClearXmit|0x80)
	h.out(regLineControl, 0x03)
	h.out(regModemControl, mcrDTR|mcrRTS|mcrOut2)
	h.out(regIntEnable, ierReceivedData|ierLineStatus)
}

func (h *harness) wantEdges(want int64) {
	h.t.Helper()
	if got := h.irq.count(); got != want {
		h.t.Fatalf("interrupt edges = %d, want %d", got, want)
	}
}

func (h *harness) wantIIR(want uint8) {
	h.t.Helper()
	if got := h.in(regIntIdent); got != want {
		h.t.Fatalf("IIR = %#02x, want %#02x", got, want)
	}
}

// eventually polls cond until it holds; the generous deadline only turns a
// hang into a failure and never decides a pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
