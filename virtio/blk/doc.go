// Package blk is the virtio block device (virtio 1.2, section 5.2): it
// serves one request queue from a raw disk image on the host, reading and
// writing the guest's buffers directly with preadv/pwritev.
//
// The package splits by role: backend.go owns the host file (locking and
// I/O), config.go the feature bits and configuration space, request.go turns
// a descriptor chain into a validated request, worker.go executes requests on
// the device's goroutine, device.go is the guest-facing virtio.Device and
// state.go the snapshot state.
//
// Everything the guest supplies is hostile: header fields, sector numbers,
// lengths and discard segments are copied out of guest memory before they
// are checked, and a bad request fails with VIRTIO_BLK_S_IOERR or
// VIRTIO_BLK_S_UNSUPP instead of touching the host.
package blk
