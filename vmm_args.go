package smol

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ServeMachineArgs is the body of the hidden `machine __vmm` command, for
// every binary that serves machines (the smol CLI and the containerd
// shim): it reads NAME [--restore PATH [--ram-fd N [--ram-overlay-fd N]]]
// [--ready-fd N], the
// arguments the starter (NamedMachine.Start, a fork) passes, and serves
// the machine (ServeMachine). A usage error is returned as such.
func ServeMachineArgs(args []string) error {
	var name string
	src := VMMSource{}
	ramFD, overlayFD, readyFD := -1, -1, -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		fd := func() (int, error) {
			v, err := value()
			if err != nil {
				return -1, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 3 {
				return -1, fmt.Errorf("%s %q: an inherited descriptor above 2", a, v)
			}
			return n, nil
		}
		var err error
		switch {
		case a == "--restore":
			src.Snapshot, err = value()
		case a == "--ram-fd":
			ramFD, err = fd()
		case a == "--ram-overlay-fd":
			overlayFD, err = fd()
		case a == "--ready-fd":
			readyFD, err = fd()
		case len(a) > 0 && a[0] == '-':
			err = fmt.Errorf("unknown flag %s", a)
		case name == "":
			name = a
		default:
			err = fmt.Errorf("one machine name, not %q and %q", name, a)
		}
		if err != nil {
			return &VMMUsageError{err.Error()}
		}
	}
	switch {
	case name == "":
		return &VMMUsageError{"the machine's name is missing"}
	case ramFD >= 0 && (src.Snapshot == "" || ramFD != forkChildFD):
		return &VMMUsageError{fmt.Sprintf("--ram-fd goes with --restore, and is %d", forkChildFD)}
	case overlayFD >= 0 && (ramFD < 0 || overlayFD != forkChildOverlayFD):
		return &VMMUsageError{fmt.Sprintf("--ram-overlay-fd goes with --ram-fd, and is %d", forkChildOverlayFD)}
	case readyFD >= 0 && (readyFD == ramFD || readyFD == overlayFD):
		return &VMMUsageError{"--ready-fd is not the RAM's descriptor"}
	}
	if ramFD >= 0 {
		src.RAM.Base = os.NewFile(uintptr(ramFD), "fork-ram")
	}
	if overlayFD >= 0 {
		src.RAM.Overlay = os.NewFile(uintptr(overlayFD), "fork-ram-overlay")
	}
	if readyFD >= 0 {
		syscall.CloseOnExec(readyFD) // not for the VMM's own helpers
		src.Ready = os.NewFile(uintptr(readyFD), "ready")
	}
	return ServeMachine(name, src)
}

// VMMUsageError is a `machine __vmm` command line that ServeMachineArgs
// cannot take.
type VMMUsageError struct{ Msg string }

func (e *VMMUsageError) Error() string {
	return "usage: machine " + vmmCommand + " NAME [--restore PATH [--ram-fd N [--ram-overlay-fd N]]] [--ready-fd N]: " + e.Msg
}
