package vmm

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestIRQLineAfterClose: a trigger after close (the input pump racing the
// machine's end) writes nothing, in particular not to a descriptor that
// reused the line's number.
func TestIRQLineAfterClose(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	l := &irqLine{gsi: 4, fd: fd}
	if err := l.Trigger(); err != nil {
		t.Fatal(err)
	}
	l.close()
	l.close() // again: nothing
	reused, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(reused)
	if err := l.Trigger(); err != nil {
		t.Errorf("a trigger after close: %v", err)
	}
	var b [8]byte
	if _, err := unix.Read(reused, b[:]); err != unix.EAGAIN {
		t.Errorf("a trigger after close reached descriptor %d (the line's was %d): read %v", reused, fd, err)
	}
}
