package vsock

import (
	"testing"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

// newPassWorker returns a worker over fresh queues in guest memory, with a
// fake dialer and no host side, to drive pump directly.
func newPassWorker(t *testing.T) (*worker, [numQueues]*virtiotest.DriverQueue) {
	t.Helper()
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	w := &worker{cid: DefaultCID, irq: virtiotest.NewInterrupter(), mux: newMuxer(DefaultCID, &fakeDialer{})}
	var drv [numQueues]*virtiotest.DriverQueue
	for i := range numQueues {
		drv[i] = virtiotest.NewDriverQueue(t, mem, uint64(i)*(2<<20), queueSize)
		q, err := virtio.NewQueue(mem, drv[i].State())
		if err != nil {
			t.Fatal(err)
		}
		w.queues[i] = q
	}
	return w, drv
}

// TestTxBudgetPerPass: one pass takes at most txBudgetPerPass tx chains and
// says there may be more, so the worker can look at the host side between
// passes; the following passes take the rest.
func TestTxBudgetPerPass(t *testing.T) {
	w, drv := newPassWorker(t)
	// RSTs for connections that do not exist: no reply, no backlog.
	const total = 3*txBudgetPerPass + 5
	rst := Header{SrcCID: DefaultCID, DstCID: HostCID, SrcPort: 1, DstPort: 2, Type: TypeStream, Op: OpRST}
	for range total {
		drv[txQueue].AddChain([][]byte{rst.Bytes()}, nil)
	}
	taken := 0
	for pass := 1; ; pass++ {
		more := w.pump()
		n := len(drv[txQueue].Used())
		taken += n
		if n > txBudgetPerPass {
			t.Fatalf("pass %d took %d chains, budget %d", pass, n, txBudgetPerPass)
		}
		if !more {
			break
		}
		if n != txBudgetPerPass {
			t.Fatalf("pass %d took %d chains and reported more", pass, n)
		}
		if pass > total {
			t.Fatal("passes do not end")
		}
	}
	if taken != total {
		t.Fatalf("took %d chains, want %d", taken, total)
	}
	if w.pump() {
		t.Fatal("an empty queue reported more")
	}
}

// TestTxBudgetCountsMalformedChains: chains that fail to parse (here, a
// head outside the descriptor table) cost budget like any other, so a
// guest cannot stretch a pass with them.
func TestTxBudgetCountsMalformedChains(t *testing.T) {
	w, drv := newPassWorker(t)
	for range txBudgetPerPass + 1 {
		drv[txQueue].PutAvailEntry(drv[txQueue].AvailIdx(), queueSize+7)
		drv[txQueue].SetAvailIdx(drv[txQueue].AvailIdx() + 1)
	}
	if !w.pump() {
		t.Fatal("a pass over more than its budget of malformed chains reported no more")
	}
	if w.pump() {
		t.Fatal("the second pass found more")
	}
}
