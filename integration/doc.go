// Package integration boots real Linux guests with smol and checks what the
// guest sees and what smol does: CPUs online, the serial console both ways,
// a distribution's stock kernel, poweroff and reboot, and bad input.
//
// On hosts whose /dev/kvm cannot boot Linux (the PVM machines this project
// is developed on) TestMain re-runs the test binary inside the test box (see
// package box), so `go test ./integration` boots real guests anywhere. The
// kernels, the guest init and bin/smol come from `make kernel box-kernel
// stock-kernel guest build`, which `make test` runs first.
package integration
