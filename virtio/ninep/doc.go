// Package ninep is the virtio-9p device: a host directory served to the
// guest as a 9P2000.L file system (smol run -v HOST:GUEST[:ro]).
//
// Why 9P and not virtio-fs: virtio-fs speaks FUSE, and the Go FUSE
// libraries (go-fuse, bazil.org/fuse) serve the kernel's /dev/fuse, not a
// virtqueue; the FUSE protocol would be ours to write. 9P2000.L has a
// maintained Go server library, github.com/hugelgupf/p9 (u-root's, grown
// from gVisor's p9), which takes a stream: the device only carries each
// descriptor chain's T-message to it and its R-message back (bridge, in
// bridge.go). Linux's v9fs client is in every kernel, and QEMU's
// virtio-9p is the peer the benchmark compares against. The price is
// speed for metadata-heavy work, where virtio-fs with DAX would win.
//
// The served tree (hostfs.go) is the trust boundary: the guest is
// hostile, and it chooses every name, link and mode it sends.
package ninep
