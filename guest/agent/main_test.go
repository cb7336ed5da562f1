package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestAcceptErrorsThatKeepTheExecPort: an accept error of one connection
// or a passing shortage keeps the agent's exec port open; an error of the
// listening socket itself ends it.
func TestAcceptErrorsThatKeepTheExecPort(t *testing.T) {
	for _, err := range []error{unix.ECONNABORTED, unix.EMFILE, unix.ENOBUFS, unix.ENOMEM} {
		if !acceptCanRecover(err) {
			t.Errorf("%v ends the exec port", err)
		}
	}
	for _, err := range []error{unix.EBADF, unix.EINVAL, unix.ENOTSOCK} {
		if acceptCanRecover(err) {
			t.Errorf("%v is accepted again forever", err)
		}
	}
}
