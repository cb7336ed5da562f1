package rng

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/smolvm/smol/virtio"
)

// worker serves the request queue on the lifecycle's goroutine, which owns
// the queue.
type worker struct {
	entropy io.Reader
}

func (w *worker) run(life *virtio.Worker) {
	for life.Wait(0) {
		w.serve(life)
	}
}

// serve completes every available request, or stops early when the device
// is reset or paused.
func (w *worker) serve(life *virtio.Worker) {
	q := life.Queues[0]
	for !life.Interrupted() {
		c, err := q.Pop()
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
		if err := q.Complete(c, n, life.Interrupt, 0); err != nil {
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
