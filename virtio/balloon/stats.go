package balloon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/smolvm/smol/virtio"
)

// Tag identifies one guest statistic (virtio 1.2, section 5.5.6.4; tags 10
// and up were added later and are sent by Linux 6.12 and newer).
type Tag uint16

// Statistic tags.
const (
	TagSwapIn        Tag = 0  // bytes swapped in
	TagSwapOut       Tag = 1  // bytes swapped out
	TagMajorFaults   Tag = 2  // major page faults
	TagMinorFaults   Tag = 3  // minor page faults
	TagFreeMemory    Tag = 4  // bytes not used for anything
	TagTotalMemory   Tag = 5  // bytes the guest kernel manages
	TagAvailMemory   Tag = 6  // bytes available to new applications without swapping
	TagDiskCaches    Tag = 7  // bytes reclaimable without I/O (page cache)
	TagHugetlbAllocs Tag = 8  // successful hugetlb page allocations
	TagHugetlbFails  Tag = 9  // failed hugetlb page allocations
	TagOOMKills      Tag = 10 // OOM killer invocations
	TagAllocStalls   Tag = 11 // allocation stalls
	TagAsyncScan     Tag = 12 // bytes scanned by kswapd
	TagDirectScan    Tag = 13 // bytes scanned by direct reclaim
	TagAsyncReclaim  Tag = 14 // bytes reclaimed by kswapd
	TagDirectReclaim Tag = 15 // bytes reclaimed by direct reclaim
	numTags              = 16
)

// Stats is the latest set of guest memory statistics. The driver chooses
// which it supplies; Supplied says which those are, so that a statistic the
// guest does not report is not mistaken for zero.
type Stats struct {
	SwapIn, SwapOut             uint64 // bytes
	MajorFaults, MinorFaults    uint64
	FreeMemory, TotalMemory     uint64 // bytes
	AvailableMemory, DiskCaches uint64 // bytes
	HugetlbAllocations          uint64
	HugetlbFailures             uint64
	OOMKills, AllocStalls       uint64
	AsyncScan, DirectScan       uint64 // bytes
	AsyncReclaim, DirectReclaim uint64 // bytes
	Supplied                    uint32 // bit t set: the guest supplied tag t
}

// Has reports whether the guest supplied statistic t.
func (s Stats) Has(t Tag) bool { return t < numTags && s.Supplied&(1<<t) != 0 }

func (s *Stats) set(t Tag, v uint64) {
	fields := [numTags]*uint64{
		&s.SwapIn, &s.SwapOut, &s.MajorFaults, &s.MinorFaults,
		&s.FreeMemory, &s.TotalMemory, &s.AvailableMemory, &s.DiskCaches,
		&s.HugetlbAllocations, &s.HugetlbFailures, &s.OOMKills, &s.AllocStalls,
		&s.AsyncScan, &s.DirectScan, &s.AsyncReclaim, &s.DirectReclaim,
	}
	if t >= numTags {
		return // the specification says to ignore tags one does not know
	}
	*fields[t] = v
	s.Supplied |= 1 << t
}

// statEntryBytes is the size of struct virtio_balloon_stat: le16 tag, le64
// value, packed.
const statEntryBytes = 10

// MaxStatsBytes bounds a statistics buffer: 256 entries, far more than the
// 16 tags that exist (a driver may repeat a tag; the last one counts).
const MaxStatsBytes = 256 * statEntryBytes

// parseStats decodes a statistics buffer. A length that is not a whole
// number of entries is malformed; unknown tags are ignored.
func parseStats(b []byte) (Stats, error) {
	var s Stats
	if len(b)%statEntryBytes != 0 {
		return s, fmt.Errorf("%w: %d bytes of statistics is not a whole number of %d-byte entries", errMalformedRequest, len(b), statEntryBytes)
	}
	le := binary.LittleEndian
	for off := 0; off < len(b); off += statEntryBytes {
		s.set(Tag(le.Uint16(b[off:])), le.Uint64(b[off+2:]))
	}
	return s, nil
}

// readStats copies a statistics buffer (the chain's device-readable bytes)
// out of guest memory and decodes it.
func readStats(c *virtio.Chain) (Stats, error) {
	n := c.ReadableLen()
	if n > MaxStatsBytes {
		return Stats{}, fmt.Errorf("%w: %d bytes of statistics exceed %d", errMalformedRequest, n, MaxStatsBytes)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c.NewReader(), buf); err != nil {
		return Stats{}, fmt.Errorf("read statistics: %w", err)
	}
	return parseStats(buf)
}

var (
	// ErrNoStats reports that the guest has not sent statistics yet.
	ErrNoStats = errors.New("balloon: no statistics from the guest yet")
	// ErrStatsUnavailable reports that statistics cannot be requested: the
	// device is not running or the driver did not set up the stats queue.
	ErrStatsUnavailable = errors.New("balloon: guest statistics are unavailable")
)

// statsBox holds the latest statistics, shared by the worker that receives
// them and the host goroutines that read them.
type statsBox struct {
	mu      sync.Mutex
	latest  Stats
	at      time.Time // when latest arrived; zero: never
	updates uint64
	// changed is closed and replaced at every update, waking RefreshStats.
	changed chan struct{}
	// held is the head of the stats buffer the device holds (to return
	// when the host asks for fresh statistics), -1 when it holds none.
	held int
}

func newStatsBox() *statsBox { return &statsBox{changed: make(chan struct{}), held: -1} }

func (b *statsBox) publish(s Stats, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.latest, b.at = s, at
	b.updates++
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *statsBox) get() (Stats, time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.latest, b.at, !b.at.IsZero()
}

func (b *statsBox) watch() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

func (b *statsBox) setHeld(head int) {
	b.mu.Lock()
	b.held = head
	b.mu.Unlock()
}

func (b *statsBox) heldHead() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Stats returns the latest guest statistics and when they arrived, or
// ErrNoStats if none has arrived. They persist across resets: the last
// word from a guest stays the best estimate until it says more.
func (d *Device) Stats() (Stats, time.Time, error) {
	s, at, ok := d.stats.get()
	if !ok {
		return Stats{}, time.Time{}, ErrNoStats
	}
	return s, at, nil
}

// RefreshStats asks the guest for fresh statistics and waits for them
// until ctx ends. The device returns the buffer the guest posted last,
// which is the protocol's request: the guest fills a new one and posts it.
// If the buffer is already with the guest (an earlier request is being
// answered), that answer is the fresh statistics.
func (d *Device) RefreshStats(ctx context.Context) (Stats, time.Time, error) {
	d.mu.Lock()
	w := d.worker
	d.mu.Unlock()
	if w == nil || w.statsQueue == nil {
		return Stats{}, time.Time{}, ErrStatsUnavailable
	}
	changed := d.stats.watch()
	stopped := d.Lifecycle.Stopped()
	w.requestStats()
	select {
	case <-changed:
		s, at, _ := d.stats.get()
		return s, at, nil
	case <-stopped:
		return Stats{}, time.Time{}, fmt.Errorf("%w: the device was reset while waiting", ErrStatsUnavailable)
	case <-ctx.Done():
		return Stats{}, time.Time{}, fmt.Errorf("balloon: waiting for guest statistics: %w", ctx.Err())
	}
}
