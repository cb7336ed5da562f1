// Package net is the virtio network device (virtio 1.2, section 5.1): one
// receive and one transmit queue between the guest and a host Backend,
// normally a TAP interface (github.com/smolvm/smol/netdev/tap), later a
// userspace network stack with egress policy.
//
// Frames cross the device with their 12-byte virtio_net_hdr, so checksum
// offload and TCP segmentation offload work end to end: the guest hands the
// host partially checksummed super-frames and receives them, as far as the
// driver negotiated (the device tells the backend with SetOffloads).
//
// The package splits by role: config.go holds the feature bits and the
// configuration space, header.go parses and checks the virtio-net header,
// backend.go defines what a host backend provides, tx.go and rx.go move
// frames between the queues and the backend on the device's worker (worker.go),
// device.go is the guest-facing virtio.Device and state.go the snapshot state.
//
// Data moves without copies where it can: transmit hands the backend the
// guest's buffers (behind a private copy of the validated header), receive
// reads a frame straight into the first receive chain and copies only the
// part that overflows into further chains (VIRTIO_NET_F_MRG_RXBUF).
//
// Everything the guest supplies is hostile: headers are copied out of guest
// memory before they are checked, and bad chains or headers drop that frame
// (counted in Stats), never the device. A transmitted header must describe a
// frame a real stack could have sent (checkTxHeader lists the rules: fields
// inside the frame, known GSO types, segments of at least minGSOSize bytes
// that fit an IP packet and the MTU), so no backend is handed a super-frame
// that would make it cut thousands of segments.
package net
