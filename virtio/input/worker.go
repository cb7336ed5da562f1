package input

import (
	"encoding/binary"
	"errors"
	"log/slog"

	"github.com/smolvm/smol/virtio"
)

// run delivers the backlog into the event queue's buffers as they come,
// and returns the status queue's buffers (LED changes: there are no LEDs).
func (d *Device) run(life *virtio.Worker) {
	for {
		switch life.Next(life.Wake(eventQueue), d.arrived.C(), life.Wake(statusQueue)) {
		case -1:
			return
		case 2:
			d.drainStatus(life)
		default: // buffers posted, or events sent
			d.deliver(life)
		}
	}
}

// deliver moves events from the backlog into posted buffers, one event
// per buffer, until either runs out.
func (d *Device) deliver(life *virtio.Worker) {
	q := life.Queues[eventQueue]
	for !life.Interrupted() {
		d.mu.Lock()
		if len(d.backlog) == 0 {
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		c, err := q.Pop()
		if err != nil {
			if errors.Is(err, virtio.ErrMalformed) {
				continue
			}
			return
		}
		if c == nil {
			return // no buffer: the events wait for the guest's next ones
		}
		d.mu.Lock()
		e := d.backlog[0]
		d.backlog = d.backlog[1:]
		d.counts.Delivered++
		d.mu.Unlock()
		var b [8]byte
		binary.LittleEndian.PutUint16(b[0:], e.Type)
		binary.LittleEndian.PutUint16(b[2:], e.Code)
		binary.LittleEndian.PutUint32(b[4:], uint32(e.Value))
		w := c.NewWriter()
		w.Write(b[:]) // a buffer too small gets what fits
		if err := q.Complete(c, w.Written(), life.Interrupt, eventQueue); err != nil {
			slog.Warn("virtio-input: complete", "err", err)
			return
		}
	}
}

func (d *Device) drainStatus(life *virtio.Worker) {
	q := life.Queues[statusQueue]
	if q == nil {
		return
	}
	for !life.Interrupted() {
		c, err := q.Pop()
		if err != nil {
			if errors.Is(err, virtio.ErrMalformed) {
				continue
			}
			return
		}
		if c == nil {
			return
		}
		if err := q.Complete(c, 0, life.Interrupt, statusQueue); err != nil {
			return
		}
	}
}
