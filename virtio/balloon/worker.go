package balloon

import (
	"errors"
	"time"

	"github.com/smolvm/smol/virtio"
)

// worker serves the balloon's queues on its own goroutine, which owns them.
// Balloon traffic is light, so one wake-up channel covers every queue and
// each wake-up looks at all of them.
type worker struct {
	mem      virtio.Memory
	discard  Discarder
	irq      virtio.Interrupter
	counters *counters
	stats    *statsBox

	inflate, deflate *virtio.Queue
	statsQueue       *virtio.Queue // nil: STATS_VQ not negotiated or queue not enabled
	reportQueue      *virtio.Queue // nil: REPORTING not negotiated or queue not enabled
	statsIndex       int           // transport index of statsQueue
	reportIndex      int           // transport index of reportQueue

	// held is the stats buffer the device keeps until the host wants
	// fresh statistics; only the worker goroutine touches it.
	held *virtio.Chain

	statsReq virtio.Wakeup  // the host wants fresh statistics
	life     *virtio.Worker // the lifecycle's view of this activation
}

func (w *worker) requestStats() { w.statsReq.Signal() }

// run serves the queues until the device is reset. The lifecycle's first
// wake-up serves what the driver posted before DRIVER_OK, whose
// notifications the transport dropped: Linux primes the stats queue then.
func (w *worker) run(life *virtio.Worker) {
	w.life = life
	for {
		select {
		case <-life.Stop():
			return
		case <-life.Pausing():
			if !life.Park() {
				return
			}
		case <-life.Wake(0):
			w.drain()
		case <-w.statsReq.C():
			w.returnStatsBuffer()
		}
	}
}

func (w *worker) stopping() bool { return w.life.Interrupted() }

// drain serves every queue until it is empty.
func (w *worker) drain() {
	w.serve(w.inflate, inflateQueue, w.handleInflate)
	w.serve(w.deflate, deflateQueue, w.handleDeflate)
	w.serve(w.reportQueue, w.reportIndex, w.handleReport)
	w.collectStats()
}

// serve completes every available chain of q with handle, then interrupts
// the driver once if it asked for it (a queue with nothing to complete is
// only read, so idle queues cost nothing and race with no one). Every balloon request is answered
// with nothing written: the driver only waits for the buffer to come back.
func (w *worker) serve(q *virtio.Queue, index int, handle func(*virtio.Chain)) {
	if q == nil {
		return
	}
	pushed := false
	for !w.stopping() {
		c, ok := w.pop(q)
		if !ok {
			break
		}
		handle(c)
		if err := q.Push(c, 0); err != nil {
			w.counters.malformed.Add(1)
			continue
		}
		pushed = true
	}
	if pushed {
		w.interrupt(q, index)
	}
}

// pop returns the next chain of q, skipping malformed ones (the queue
// consumed them; they cannot be answered).
func (w *worker) pop(q *virtio.Queue) (*virtio.Chain, bool) {
	for {
		c, err := q.Pop()
		if err != nil {
			w.counters.malformed.Add(1)
			if errors.Is(err, virtio.ErrQueueBroken) {
				return nil, false
			}
			continue
		}
		return c, c != nil
	}
}

func (w *worker) interrupt(q *virtio.Queue, index int) {
	if err := q.Signal(w.irq, index); err != nil {
		w.counters.interruptErrors.Add(1)
	}
}

// handleInflate discards the pages the guest put in the balloon. Page frame
// numbers outside guest RAM are skipped; the rest are discarded in runs.
func (w *worker) handleInflate(c *virtio.Chain) {
	pfns, err := readPFNs(c)
	if err != nil {
		w.counters.malformed.Add(1)
		return
	}
	runs, rejected := pageRuns(pfns, func(addr uint64) bool { return pageInRAM(w.mem, addr) })
	w.counters.rejectedPages.Add(uint64(rejected))
	for _, r := range runs {
		w.counters.inflatedPages.Add(r.count)
		if err := w.discard.Discard(r.addr(), r.length()); err != nil {
			w.counters.discardErrors.Add(1)
			continue
		}
		w.counters.inflateDiscarded.Add(r.length())
	}
}

// handleDeflate acknowledges pages the guest takes back. There is nothing
// to do: a discarded page is faulted back in, as zeroes, when the guest
// touches it. The page frame numbers are still checked and counted.
func (w *worker) handleDeflate(c *virtio.Chain) {
	pfns, err := readPFNs(c)
	if err != nil {
		w.counters.malformed.Add(1)
		return
	}
	runs, rejected := pageRuns(pfns, func(addr uint64) bool { return pageInRAM(w.mem, addr) })
	w.counters.rejectedPages.Add(uint64(rejected))
	for _, r := range runs {
		w.counters.deflatedPages.Add(r.count)
	}
}

// handleReport discards the free ranges of one free page report. Each
// buffer is judged on its own: only page-aligned, device-writable ranges
// inside guest RAM are discarded.
func (w *worker) handleReport(c *virtio.Chain) {
	judge := func(b virtio.Buffer, writable bool) {
		if err := checkReportedRange(w.mem, b, writable); err != nil {
			w.counters.rejectedRanges.Add(1)
			return
		}
		w.counters.reportedRanges.Add(1)
		if err := w.discard.Discard(b.Addr, uint64(b.Len)); err != nil {
			w.counters.discardErrors.Add(1)
			return
		}
		w.counters.reportDiscarded.Add(uint64(b.Len))
	}
	for _, b := range c.Readable() {
		judge(b, false)
	}
	for _, b := range c.Writable() {
		judge(b, true)
	}
}

// collectStats takes the statistics buffers the driver posted. The newest
// one is kept, to be returned when the host asks for fresh statistics; a
// driver that posts more than one (which the protocol forbids) gets the
// older ones back at once.
func (w *worker) collectStats() {
	q := w.statsQueue
	if q == nil {
		return
	}
	pushed := false
	for !w.stopping() {
		c, ok := w.pop(q)
		if !ok {
			break
		}
		if w.held != nil {
			if err := q.Push(w.held, 0); err != nil {
				w.counters.malformed.Add(1)
			} else {
				pushed = true
			}
		}
		w.held = c
		w.stats.setHeld(int(c.Head))
		s, err := readStats(c)
		if err != nil {
			w.counters.malformed.Add(1)
			continue
		}
		w.counters.statsUpdates.Add(1)
		w.stats.publish(s, time.Now())
	}
	if pushed {
		w.interrupt(q, w.statsIndex)
	}
}

// returnStatsBuffer gives the held stats buffer back to the driver, which
// is how the device asks for fresh statistics.
func (w *worker) returnStatsBuffer() {
	q := w.statsQueue
	if q == nil || w.held == nil {
		return
	}
	c := w.held
	w.held = nil
	w.stats.setHeld(-1)
	if err := q.Push(c, 0); err != nil {
		w.counters.malformed.Add(1)
		return
	}
	w.interrupt(q, w.statsIndex)
}
