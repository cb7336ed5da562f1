// Package tap creates and configures Linux TAP interfaces for VM network
// devices: it opens /dev/net/tun with a virtio-net header on every frame, so
// the guest's checksum and segmentation offloads pass straight through the
// host kernel, and it moves frames with readv/writev directly between the
// interface and guest memory.
//
// A *TAP implements the backend interface of the virtio-net device
// (github.com/smolvm/smol/virtio/net). It speaks that device's vocabulary on
// purpose: frames carry the 12-byte virtio_net_hdr (virtio 1.2, section
// 5.1.6) and offloads are configured from virtio-net feature bits, because
// that is exactly what the TUN driver's IFF_VNET_HDR mode implements.
//
// Creating an interface needs CAP_NET_ADMIN, and so does bringing it up or
// giving it an address. An administrator can instead create a persistent TAP
// owned by the VMM's user (ip tuntap add NAME mode tap user USER) and bring
// it up: Create then only attaches to it, which needs no privilege.
//
// The interface exists as long as the *TAP is open (unless it was created
// persistent beforehand); Close removes it.
package tap
