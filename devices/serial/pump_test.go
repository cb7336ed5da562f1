package serial

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestInputPumpDeliversEverything pumps far more than the FIFO holds; the
// guest drains it slowly, and every byte must arrive, in order.
func TestInputPumpDeliversEverything(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	input := bytes.Repeat([]byte("0123456789abcdef"), 100)
	pump := h.uart.AttachInput(bytes.NewReader(input))

	var got []byte
	eventually(t, "all input", func() bool {
		for h.in(regLineStatus)&lsrDataReady != 0 {
			got = append(got, h.in(regData))
		}
		return len(got) >= len(input)
	})
	if err := pump.Wait(); err != nil {
		t.Fatalf("pump ended with %v", err)
	}
	if !bytes.Equal(got, input) {
		t.Fatal("input arrived corrupted or out of order")
	}
	if h.in(regLineStatus)&lsrOverrun != 0 {
		t.Fatal("overrun while pumping: input must wait, not be dropped")
	}
}

func TestInputPumpCloseWhileWaitingForRoom(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	pump := h.uart.AttachInput(bytes.NewReader(make([]byte, 10*ReceiveFIFOSize)))
	eventually(t, "a full FIFO", func() bool { return len(h.uart.State().Receive) == ReceiveFIFOSize })
	pump.Close()
	if err := pump.Wait(); err != nil {
		t.Fatalf("Wait after Close = %v, want nil", err)
	}
}

// TestInputPumpCloseWhileReading shows the documented limit: a blocked Read
// ends the pump only once it returns, and its data is then discarded.
func TestInputPumpCloseWhileReading(t *testing.T) {
	h := newHarness(t)
	h.openLikeLinux()
	r, w := io.Pipe()
	pump := h.uart.AttachInput(r)
	pump.Close()
	w.Write([]byte("after close")) // unblocks the pending Read
	if err := pump.Wait(); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if n := len(h.uart.State().Receive); n != 0 {
		t.Fatalf("%d bytes delivered after Close", n)
	}
}

func TestInputPumpReportsReadError(t *testing.T) {
	h := newHarness(t)
	r, w := io.Pipe()
	pump := h.uart.AttachInput(r)
	w.CloseWithError(errors.New("tty hung up"))
	if err := pump.Wait(); err == nil {
		t.Fatal("Wait = nil after a read error")
	}
}
