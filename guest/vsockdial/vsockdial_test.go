package vsockdial

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSocketWaitsAsLongAsAsked: the socket Connect connects with waits
// for the peer's answer as long as asked, not for the kernel's 2 s
// default, whose expiry can leave the host holding a connection the guest
// gave up on.
func TestSocketWaitsAsLongAsAsked(t *testing.T) {
	for _, wait := range []time.Duration{7 * time.Second, 0} {
		fd, err := Socket(wait)
		if err != nil {
			t.Skipf("no AF_VSOCK sockets on this host: %v", err)
		}
		tv, err := unix.GetsockoptTimeval(fd, unix.AF_VSOCK, unix.SO_VM_SOCKETS_CONNECT_TIMEOUT)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		// The kernel keeps it in jiffies: a few milliseconds' rounding.
		want := max(wait, MinWait)
		if got := time.Duration(tv.Nano()); got < want || got > want+10*time.Millisecond {
			t.Errorf("connect timeout for a wait of %v: %v, want %v", wait, got, want)
		}
	}
}
