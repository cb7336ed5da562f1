// Package virtiotest plays the guest driver in tests of virtio devices: it
// lays out split virtqueues in real guest memory, adds descriptor chains
// (direct or indirect), reads back the used ring and the bytes the device
// wrote, and drives a virtio-mmio transport through the driver's
// initialisation sequence, so devices are tested through the same code paths
// a Linux guest exercises.
//
// It is an ordinary package so that tests of several packages share it, but
// only tests import it: every helper takes a testing.TB and fails the test on
// misuse instead of returning errors.
package virtiotest
