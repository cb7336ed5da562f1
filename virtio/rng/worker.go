package rng

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/smolvm/smol/virtio"
)

// worker serves the request queue on its own goroutine, which owns the
// queue.
type worker struct {
	queue   *virtio.Queue
	irq     virtio.Interrupter
	entropy io.Reader
	wake    virtio.Wakeup
	task    *virtio.Task
}

func startWorker(q *virtio.Queue, irq virtio.Interrupter) *worker {
	w := &worker{queue: q, irq: irq, entropy: rand.Reader, wake: virtio.NewWakeup()}
	w.task = virtio.Go(w.run)
	return w
}

func (w *worker) kick() { w.wake.Signal() }

func (w *worker) stop() { w.task.Stop() }

func (w *worker) run(stop <-chan struct{}) {
	// Serve what the driver posted before DRIVER_OK, whose notifications
	// the transport dropped.
	w.serve(stop)
	for {
		select {
		case <-stop:
			return
		case <-w.wake.C():
			w.serve(stop)
		}
	}
}

// serve completes every available request.
func (w *worker) serve(stop <-chan struct{}) {
	for !virtio.Stopped(stop) {
		c, err := w.queue.Pop()
		if err != nil {
			// The queue consumed the bad head; keep serving the rest.
			slog.Debug("virtio-rng: skipping malformed request", "err", err)
			if errors.Is(err, virtio.ErrMalformed) {
				continue
			}
			return
		}
		if c == nil {
			return
		}
		n, err := fill(c, w.entropy)
		if err != nil {
			slog.Debug("virtio-rng: request failed", "head", c.Head, "err", err)
		}
		if err := w.queue.Complete(c, n, w.irq, 0); err != nil {
			slog.Warn("virtio-rng: complete request", "head", c.Head, "err", err)
			return
		}
	}
}

// fill writes up to MaxRequestBytes of entropy into the chain's writable
// buffers and returns how many bytes it wrote. A chain with device-readable
// buffers is not a valid request (the spec's requests are write-only): it is
// completed with nothing written.
func fill(c *virtio.Chain, entropy io.Reader) (uint32, error) {
	if c.ReadableLen() != 0 {
		return 0, fmt.Errorf("request has %d device-readable bytes", c.ReadableLen())
	}
	w := c.NewWriter()
	for w.Written() < MaxRequestBytes {
		dst, err := w.Next(MaxRequestBytes - w.Written())
		if err != nil {
			return 0, err
		}
		if dst == nil {
			break
		}
		if _, err := io.ReadFull(entropy, dst); err != nil {
			return 0, fmt.Errorf("read host entropy: %w", err)
		}
	}
	return w.Written(), nil
}
