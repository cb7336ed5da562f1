package net

import (
	"context"
	"time"

	"github.com/smolvm/smol/virtio"
)

// Work bounds per turn, so a flood in one direction cannot starve the
// other: after this many frames the worker looks at the other queue.
const (
	rxBudget = 64
	txBudget = 64
)

// backendRetryDelay is how long the readability waiter pauses after the
// backend failed, so a broken backend costs little CPU instead of a spin.
const backendRetryDelay = 50 * time.Millisecond

// worker moves frames between the queues and the backend. It owns both
// queues: only its goroutine calls Pop and Push.
type worker struct {
	rx, tx   *virtio.Queue
	mem      virtio.Memory
	irq      virtio.Interrupter
	backend  Backend
	features uint64 // negotiated
	mtu      uint16 // the MTU the driver was given (VIRTIO_NET_F_MTU negotiated), else 0
	stats    *stats

	// arm asks the waiter goroutine to wait for the backend to become
	// readable (the value is a delay to apply first); readable is its
	// answer. Both hold at most one message.
	arm      chan time.Duration
	readable chan struct{}

	rxState
	txHeader [HeaderSize]byte // validated private copy handed to the backend
	txBufs   [][]byte         // reused scatter-gather list
}

func newWorker(env virtio.Env, backend Backend, st *stats) *worker {
	return &worker{
		rx:       env.Queues[RxQueue],
		tx:       env.Queues[TxQueue],
		mem:      env.Mem,
		irq:      env.Interrupt,
		backend:  backend,
		features: env.Features,
		stats:    st,
		arm:      make(chan time.Duration, 1),
		readable: make(chan struct{}, 1),
		rxState:  rxState{spill: make([]byte, MaxPacketLen+1)},
	}
}

// run serves both queues until the device is reset, with the backend
// waiter beside it. Receive work starts when the driver adds receive
// buffers or the backend has a frame (readable); transmit work when the
// driver sends. Both run once at start: buffers made available before
// DRIVER_OK got no notification. A pause parks the worker between turns,
// keeping a held receive chain and a half-delivered frame for the resume.
func (w *worker) run(life *virtio.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan struct{})
	go func() {
		defer close(waiter)
		waitReadable(ctx, w.backend, w.arm, w.readable, w.stats)
	}()
	defer func() {
		cancel()
		<-waiter
	}()
	rxDue, txDue := true, true
	for {
		if !rxDue && !txDue {
			select {
			case <-life.Stop():
				return
			case <-life.Pausing():
				if !life.Park() {
					return
				}
			case <-life.Wake(TxQueue):
				txDue = true
			case <-life.Wake(RxQueue):
				rxDue = true
			case <-w.readable:
				rxDue = true
			}
		}
		// Pick up the other direction's wake-ups too, so a busy
		// direction cannot hide them.
		select {
		case <-life.Stop():
			return
		case <-life.Pausing():
			if !life.Park() {
				return
			}
		case <-life.Wake(TxQueue):
			txDue = true
		default:
		}
		select {
		case <-life.Wake(RxQueue):
			rxDue = true
		case <-w.readable:
			rxDue = true
		default:
		}
		if txDue {
			txDue = w.processTx()
		}
		if rxDue {
			rxDue = w.processRx()
		}
	}
}

// armWaiter asks the waiter to report when the backend is readable, after
// delay.
func (w *worker) armWaiter(delay time.Duration) {
	select {
	case w.arm <- delay:
	default: // already armed
	}
}

// interrupt signals queue index if the driver wants it for what was pushed.
func (w *worker) interrupt(q *virtio.Queue, index int) {
	if err := q.Signal(w.irq, index); err != nil {
		w.stats.interruptErrors.Add(1)
	}
}

// waitReadable is the waiter goroutine: each time the worker arms it, it
// waits (off the worker, which must keep serving transmit) until the backend
// is readable and says so. It waits only when armed, so a backend full of
// frames the guest has no buffers for wakes nobody.
func waitReadable(ctx context.Context, backend Backend, arm <-chan time.Duration, readable chan<- struct{}, st *stats) {
	for {
		var delay time.Duration
		select {
		case <-ctx.Done():
			return
		case delay = <-arm:
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
		if err := backend.WaitReadable(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			// Let the worker try a read anyway; its failure re-arms
			// with a delay.
			st.backendErrors.Add(1)
		}
		select {
		case readable <- struct{}{}:
		default:
		}
	}
}
