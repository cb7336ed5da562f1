package serial

import "testing"

// FuzzRegisterAccess drives the UART with arbitrary guest accesses and host
// input and checks the invariants a hostile guest must not break.
func FuzzRegisterAccess(f *testing.F) {
	f.Add([]byte{0x24, 0x10, 0x21, 0x0f, 0x00, 'a', 0x80, 0x00})
	f.Add([]byte{0x22, 0x01, 0x24, 0x18, 0x20, 0x41, 0x05, 0x00, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, ops []byte) {
		irq := &countingInterrupt{}
		u := New(irq, nil)
		defer u.Close()
		for len(ops) >= 2 {
			op, v := ops[0], ops[1]
			ops = ops[2:]
			offset := uint64(op & 0x0f)
			switch op >> 4 {
			case 0: // guest read
				var b [1]byte
				u.Read(offset, b[:])
			case 1: // wide read
				b := make([]byte, 1<<(v%4))
				u.Read(offset, b)
			case 2: // guest write
				u.Write(offset, []byte{v})
			case 3: // host input
				u.Enqueue(make([]byte, v))
			}
		}
		s := u.State()
		if len(s.Receive) > ReceiveFIFOSize || len(s.Transmit) > TransmitQueueSize {
			t.Fatalf("queues overflowed: %d received, %d queued", len(s.Receive), len(s.Transmit))
		}
		var iir [1]byte
		u.Read(regIntIdent, iir[:])
		if id := iir[0] & 0x3f; id != iirNoInterrupt && id != iirLineStatus && id != iirReceivedData &&
			id != iirTHREmpty && id != iirModemStatus {
			t.Fatalf("IIR = %#x: not a 16550A cause", iir[0])
		}
	})
}
