package net

import "encoding/binary"

// Feature bits of virtio-net (virtio 1.2, section 5.1.3) the device knows.
const (
	FeatureCsum      = 1 << 0  // the driver may send partially checksummed frames
	FeatureGuestCsum = 1 << 1  // the driver accepts partially checksummed frames
	FeatureMTU       = 1 << 3  // config mtu is valid
	FeatureMAC       = 1 << 5  // config mac is valid
	FeatureGuestTSO4 = 1 << 7  // the driver accepts TCPv4 super-frames
	FeatureGuestTSO6 = 1 << 8  // the driver accepts TCPv6 super-frames
	FeatureGuestECN  = 1 << 9  // ... with the ECN (CWR) bit
	FeatureGuestUFO  = 1 << 10 // the driver accepts UDP fragmentation offload (not offered)
	FeatureHostTSO4  = 1 << 11 // the driver may send TCPv4 super-frames
	FeatureHostTSO6  = 1 << 12 // the driver may send TCPv6 super-frames
	FeatureHostECN   = 1 << 13 // ... with the ECN (CWR) bit
	FeatureHostUFO   = 1 << 14 // the driver may send UFO frames (not offered)
	FeatureMrgRxBuf  = 1 << 15 // a received frame may span several receive chains
	FeatureStatus    = 1 << 16 // config status is valid
)

// OffloadFeatures are the feature bits that depend on the backend: it must
// accept what the guest sends with them and be able to deliver what the
// guest agreed to receive. The device offers those the backend supports.
const OffloadFeatures = FeatureCsum | FeatureGuestCsum | FeatureGuestTSO4 | FeatureGuestTSO6 |
	FeatureGuestECN | FeatureHostTSO4 | FeatureHostTSO6 | FeatureHostECN

// Queue indices and size.
const (
	RxQueue   = 0
	TxQueue   = 1
	QueueSize = 256
)

// Frame limits.
const (
	// HeaderSize is the virtio-net header of virtio 1.x (struct
	// virtio_net_hdr with num_buffers) that precedes every frame.
	HeaderSize = 12
	// MaxFrameLen is the largest Ethernet frame (without the virtio-net
	// header) the device moves in either direction: a 64 KiB IP
	// super-frame with its Ethernet and VLAN headers. Larger frames are
	// dropped.
	MaxFrameLen = 65550
	// MaxPacketLen is a frame with its header, as the backend sees it.
	MaxPacketLen = HeaderSize + MaxFrameLen
	// maxSegments bounds the buffers of one frame handed to the backend
	// (readv/writev accept at most 1024).
	maxSegments = 1024
)

// Link status bits of the config status field.
const StatusLinkUp = 1

// Offsets in struct virtio_net_config (virtio 1.2, section 5.1.4).
const (
	cfgMAC               = 0  // u8[6]
	cfgStatus            = 6  // le16
	cfgMaxVirtqueuePairs = 8  // le16
	cfgMTU               = 10 // le16
	configSize           = 12 // end of the fields smol offers
)

// buildConfig lays out the configuration space.
func buildConfig(mac [6]byte, linkUp bool, mtu uint16) [configSize]byte {
	var c [configSize]byte
	copy(c[cfgMAC:], mac[:])
	if linkUp {
		binary.LittleEndian.PutUint16(c[cfgStatus:], StatusLinkUp)
	}
	// Only meaningful with VIRTIO_NET_F_MQ (not offered), where 1 would
	// still be the truth: one queue pair.
	binary.LittleEndian.PutUint16(c[cfgMaxVirtqueuePairs:], 1)
	binary.LittleEndian.PutUint16(c[cfgMTU:], mtu)
	return c
}
