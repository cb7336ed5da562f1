package blk

import "encoding/binary"

// Feature bits of virtio-blk (virtio 1.2, section 5.2.3).
const (
	FeatureSizeMax     = 1 << 1  // size_max: largest single segment
	FeatureSegMax      = 1 << 2  // seg_max: most data segments per request
	FeatureRO          = 1 << 5  // the disk is read-only
	FeatureBlkSize     = 1 << 6  // blk_size: the logical block size
	FeatureFlush       = 1 << 9  // VIRTIO_BLK_T_FLUSH; also means a write-back cache
	FeatureDiscard     = 1 << 13 // VIRTIO_BLK_T_DISCARD and its config fields
	FeatureWriteZeroes = 1 << 14 // VIRTIO_BLK_T_WRITE_ZEROES and its config fields
)

// QueueSize is the size of the single request queue.
const QueueSize = 256

// Limits advertised in the configuration space. The driver promises to
// stay within them. The device enforces the discard and write-zeroes
// limits (they bound host work per request); seg_max and size_max only
// shape the driver's requests, since every buffer is bounds-checked anyway.
const (
	// SegMax leaves room in a full queue for the header and the status
	// descriptors of a request.
	SegMax = QueueSize - 2
	// SizeMax bounds one data segment; Linux never sends more than its
	// page-based segment size anyway.
	SizeMax = 1 << 20
	// MaxDiscardSectors and MaxWriteZeroesSectors bound one segment of
	// such a request (1 GiB), so a single request cannot keep the worker
	// writing zeroes for minutes where the host lacks FALLOC_FL_ZERO_RANGE.
	MaxDiscardSectors     = 1 << 21
	MaxWriteZeroesSectors = 1 << 21
	// MaxDiscardSegs and MaxWriteZeroesSegs bound the segments of one
	// request, and with them the parsing work per request.
	MaxDiscardSegs     = 32
	MaxWriteZeroesSegs = 32
	// DiscardSectorAlignment (4 KiB) tells the driver the granularity at
	// which a punched hole actually frees host space on common file
	// systems; unaligned discards still work (the file system zeroes the
	// partial blocks).
	DiscardSectorAlignment = 4096 / SectorSize
)

// Offsets in struct virtio_blk_config (virtio 1.2, section 5.2.4). All
// fields are little-endian.
const (
	cfgCapacity               = 0  // le64, in 512-byte sectors
	cfgSizeMax                = 8  // le32
	cfgSegMax                 = 12 // le32
	cfgBlkSize                = 20 // le32 (16..19 is the geometry, not offered)
	cfgMaxDiscardSectors      = 36 // le32 (24..35: topology, writeback, num_queues)
	cfgMaxDiscardSeg          = 40 // le32
	cfgDiscardSectorAlignment = 44 // le32
	cfgMaxWriteZeroesSectors  = 48 // le32
	cfgMaxWriteZeroesSeg      = 52 // le32
	cfgWriteZeroesMayUnmap    = 56 // u8, then 3 bytes of padding
	configSize                = 60 // end of the fields smol offers
)

// buildConfig lays out the configuration space. Fields of features the
// device does not offer stay zero, as the specification expects.
func buildConfig(sectors uint64, readOnly bool) [configSize]byte {
	var c [configSize]byte
	le := binary.LittleEndian
	le.PutUint64(c[cfgCapacity:], sectors)
	le.PutUint32(c[cfgSizeMax:], SizeMax)
	le.PutUint32(c[cfgSegMax:], SegMax)
	le.PutUint32(c[cfgBlkSize:], SectorSize)
	if !readOnly {
		le.PutUint32(c[cfgMaxDiscardSectors:], MaxDiscardSectors)
		le.PutUint32(c[cfgMaxDiscardSeg:], MaxDiscardSegs)
		le.PutUint32(c[cfgDiscardSectorAlignment:], DiscardSectorAlignment)
		le.PutUint32(c[cfgMaxWriteZeroesSectors:], MaxWriteZeroesSectors)
		le.PutUint32(c[cfgMaxWriteZeroesSeg:], MaxWriteZeroesSegs)
		c[cfgWriteZeroesMayUnmap] = 1 // an unmap write-zeroes punches a hole
	}
	return c
}

// offeredFeatures lists what the device offers for a disk: a read-only disk
// offers RO and neither discard nor write zeroes, which would modify it.
func offeredFeatures(readOnly bool) uint64 {
	f := uint64(FeatureSizeMax | FeatureSegMax | FeatureBlkSize | FeatureFlush)
	if readOnly {
		return f | FeatureRO
	}
	return f | FeatureDiscard | FeatureWriteZeroes
}
