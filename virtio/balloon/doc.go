// Package balloon is the virtio memory balloon device (virtio 1.2, section
// 5.5): it lets the host take guest memory back. The host sets a target and
// the guest inflates the balloon with pages it gives up; the guest's free
// page reporting hands over free memory on its own; and the statistics
// queue tells the host how much memory the guest really uses. Pages the
// guest gives up are discarded from the host (a hole punched in the memfd
// behind guest RAM), so they cost nothing until the guest touches them
// again, when they come back as zeroes.
//
// The package splits by role: config.go holds the feature bits, queue
// numbering and configuration space, request.go parses what the driver
// posts (page frame numbers, reported ranges, statistics), worker.go serves
// the queues on the device's goroutine, stats.go is the guest statistics
// and the host's way to ask for them, device.go the guest-facing
// virtio.Device and host controls, state.go the snapshot state.
//
// Everything the guest supplies is hostile: every page frame number and
// reported range is checked to be page-aligned guest RAM before anything is
// discarded, and malformed requests are counted and returned unprocessed.
package balloon
