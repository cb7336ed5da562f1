// Package rng is the virtio entropy device (virtio 1.2, section 5.4): it
// fills the buffers the guest posts on its one queue with bytes from the
// host's crypto/rand, so a fresh guest has entropy without waiting for it.
package rng
