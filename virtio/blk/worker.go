package blk

import (
	"errors"
	"math"

	"github.com/smolvm/smol/virtio"
)

// interruptBatch is how many completions the worker publishes before it
// offers the driver an interrupt even though more requests are waiting:
// batching saves interrupts, bounding the batch bounds latency.
const interruptBatch = 32

// worker executes requests from the request queue. It owns the queue: only
// its goroutine calls Pop and Push.
type worker struct {
	life  *virtio.Worker
	queue *virtio.Queue
	mem   virtio.Memory
	disk  *Disk
	lim   limits
	// writeThrough is set when the driver did not accept FLUSH: it then
	// assumes no volatile cache (so does Linux), and every write must be
	// stable before it completes.
	writeThrough bool
	serial       string
	stats        *stats
}

// run waits for wake-ups and drains the queue until the device is reset.
func (w *worker) run(life *virtio.Worker) {
	w.life, w.queue, w.mem = life, life.Queues[0], life.Mem
	for life.Wait(0) {
		w.drain()
	}
}

// drain completes every available request, then interrupts the driver if
// it asked for it. It returns early for a reset or a pause, so either waits
// for at most one request.
func (w *worker) drain() {
	completed := 0
	for !w.life.Interrupted() {
		chain, err := w.queue.Pop()
		if err != nil {
			// The queue consumed the bad head; nothing can be answered.
			w.stats.malformed.Add(1)
			if errors.Is(err, virtio.ErrQueueBroken) {
				break
			}
			continue
		}
		if chain == nil {
			break
		}
		written := w.handle(chain)
		if err := w.queue.Push(chain, written); err != nil {
			w.stats.malformed.Add(1)
			continue
		}
		completed++
		if completed%interruptBatch == 0 {
			w.interrupt()
		}
	}
	w.interrupt()
}

func (w *worker) interrupt() {
	if err := w.life.Signal(0); err != nil {
		w.stats.interruptErrors.Add(1)
	}
}

// handle executes one request and writes its status byte. It returns the
// used length: like QEMU, the whole writable part of the chain whenever the
// status byte was written, so the status is always the last byte the used
// length covers (drivers read it there; Linux ignores the length).
func (w *worker) handle(chain *virtio.Chain) uint32 {
	req, err := parseRequest(w.mem, chain.Readable(), chain.Writable(), w.lim)
	if req.status == nil {
		w.stats.malformed.Add(1)
		return 0
	}
	status := uint8(StatusIOErr)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) {
			status = se.status
		}
	} else {
		status = w.execute(req)
	}
	w.finish(req, status)
	return uint32(min(chain.WritableLen(), math.MaxUint32))
}

func (w *worker) finish(req request, status uint8) {
	req.status[0] = status
	switch status {
	case StatusIOErr:
		w.stats.ioErrors.Add(1)
	case StatusUnsupp:
		w.stats.unsupported.Add(1)
	}
}

// execute performs a validated request against the disk and returns its
// status.
func (w *worker) execute(req request) uint8 {
	off := int64(req.sector * SectorSize) // parseRequest bounded it by the capacity
	switch req.kind {
	case TypeIn:
		w.stats.reads.Add(1)
		n, err := w.disk.ReadAt(req.data, off)
		w.stats.bytesRead.Add(uint64(n))
		return statusOf(err)
	case TypeOut:
		w.stats.writes.Add(1)
		n, err := w.disk.WriteAt(req.data, off)
		w.stats.bytesWritten.Add(uint64(n))
		if err == nil && w.writeThrough {
			err = w.disk.Flush()
		}
		return statusOf(err)
	case TypeFlush:
		w.stats.flushes.Add(1)
		return statusOf(w.disk.Flush())
	case TypeGetID:
		w.stats.getIDs.Add(1)
		var id [IDBytes]byte // NUL-padded
		copy(id[:], w.serial)
		scatter(req.data, id[:])
		return StatusOK
	case TypeDiscard:
		w.stats.discards.Add(1)
		for _, s := range req.segments {
			if err := w.disk.Discard(int64(s.sector*SectorSize), int64(s.sectors)*SectorSize); err != nil {
				return StatusIOErr
			}
		}
		return StatusOK
	case TypeWriteZeroes:
		w.stats.writeZeroes.Add(1)
		for _, s := range req.segments {
			if err := w.disk.WriteZeroes(int64(s.sector*SectorSize), int64(s.sectors)*SectorSize, s.unmap); err != nil {
				return StatusIOErr
			}
		}
		if w.writeThrough {
			return statusOf(w.disk.Flush())
		}
		return StatusOK
	}
	return StatusUnsupp // parseRequest lets no other type through
}

func statusOf(err error) uint8 {
	if err != nil {
		return StatusIOErr
	}
	return StatusOK
}

// scatter copies src into bufs in order, as far as they reach.
func scatter(bufs [][]byte, src []byte) {
	for _, b := range bufs {
		if len(src) == 0 {
			return
		}
		src = src[copy(b, src):]
	}
}
