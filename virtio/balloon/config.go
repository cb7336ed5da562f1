package balloon

import "encoding/binary"

// Feature bits of the balloon (virtio 1.2, section 5.5.3).
const (
	// FeatureMustTellHost (not offered): the guest would have to deflate
	// before reusing a page. Discarded pages simply come back as zeroes on
	// touch, so smol has no reason to ask for it.
	FeatureMustTellHost = 1 << 0
	// FeatureStatsVQ: the statistics queue exists.
	FeatureStatsVQ = 1 << 1
	// FeatureDeflateOnOOM: the guest may take pages back from the balloon
	// when it would otherwise run out of memory, so a target set too high
	// costs the guest performance instead of an OOM kill.
	FeatureDeflateOnOOM = 1 << 2
	// FeatureFreePageHint (not offered) is a migration aid with its own
	// command protocol; free page reporting covers smol's use.
	FeatureFreePageHint = 1 << 3
	// FeaturePagePoison (not offered): the guest would expect reported
	// pages to keep poison_val, which a discard (zeroes) cannot promise
	// for a non-zero value.
	FeaturePagePoison = 1 << 4
	// FeatureReporting: the free page reporting queue exists.
	FeatureReporting = 1 << 5
)

// offeredFeatures is what the device offers.
const offeredFeatures = FeatureStatsVQ | FeatureDeflateOnOOM | FeatureReporting

// PageSize is the balloon's page unit: inflate and deflate requests carry
// guest addresses divided by 4096 whatever the guest's page size, and the
// target and actual sizes count such pages.
const PageSize = 4096

// QueueSize is the size of every balloon queue. Linux refuses a reporting
// queue smaller than 32 entries (one report is up to 32 ranges).
const QueueSize = 128

// NumQueues is how many queues the device declares: inflateq, deflateq,
// statsq and reporting_vq. free_page_vq (FREE_PAGE_HINT) is not offered.
const NumQueues = 4

// Transport indexes of the queues that always exist.
const (
	inflateQueue = 0
	deflateQueue = 1
)

// queueLayout returns the transport indexes of the stats and reporting
// queues for the negotiated features, -1 for a queue that does not exist.
//
// The specification lists fixed numbers (statsq 2, free_page_vq 3,
// reporting_vq 4), but Linux's virtio-mmio driver, like QEMU, numbers only
// the queues that exist: it asks for all five by role, leaves the unneeded
// ones out and gives the rest consecutive indexes. Without STATS_VQ the
// reporting queue is therefore queue 2, and since smol never offers
// FREE_PAGE_HINT it is queue 3 when both exist.
func queueLayout(features uint64) (stats, reporting int) {
	stats, reporting = -1, -1
	next := deflateQueue + 1
	if features&FeatureStatsVQ != 0 {
		stats = next
		next++
	}
	if features&FeatureReporting != 0 {
		reporting = next
	}
	return stats, reporting
}

// Offsets in struct virtio_balloon_config (virtio 1.2, section 5.5.4), all
// little-endian 32-bit fields.
const (
	cfgNumPages          = 0  // target, written by the device
	cfgActual            = 4  // pages in the balloon, written by the driver
	cfgFreePageHintCmdID = 8  // FREE_PAGE_HINT only: reads 0
	cfgPoisonVal         = 12 // PAGE_POISON only: written by the driver
	configSize           = 16
)

// config is the configuration space's values.
type config struct {
	numPages  uint32
	actual    uint32
	poisonVal uint32
}

func (c config) bytes() [configSize]byte {
	var b [configSize]byte
	le := binary.LittleEndian
	le.PutUint32(b[cfgNumPages:], c.numPages)
	le.PutUint32(b[cfgActual:], c.actual)
	le.PutUint32(b[cfgPoisonVal:], c.poisonVal)
	return b
}

// write applies a driver write of data at offset: the bytes land in place,
// and only the driver-owned fields (actual and poison_val) take them, so
// the driver can never change the target.
func (c *config) write(offset uint64, data []byte) {
	if offset >= configSize {
		return
	}
	b := c.bytes()
	copy(b[offset:], data)
	le := binary.LittleEndian
	c.actual = le.Uint32(b[cfgActual:])
	c.poisonVal = le.Uint32(b[cfgPoisonVal:])
}
