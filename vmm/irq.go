package vmm

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/smolvm/smol/kvm"
	"golang.org/x/sys/unix"
)

// irqLine is a device interrupt delivered through a KVM irqfd: writing the
// eventfd makes KVM raise and lower the GSI inside the kernel, so a device
// interrupts the guest without a vCPU exit and from any thread. Virtio
// devices will use the same mechanism.
//
// The input pump may trigger the line while the machine closes: mu keeps
// close from releasing the eventfd under a write, whose number could
// otherwise be reused (another machine's disk image) by then.
type irqLine struct {
	gsi uint32
	mu  sync.RWMutex
	fd  int // -1 once closed
}

func newIRQLine(vm *kvm.VM, gsi uint32) (*irqLine, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd for GSI %d: %w", gsi, err)
	}
	if err := vm.IRQFD(fd, gsi); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("irqfd for GSI %d: %w", gsi, err)
	}
	return &irqLine{gsi: gsi, fd: fd}, nil
}

// Trigger signals one edge on the line.
func (l *irqLine) Trigger() error {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.fd < 0 {
		return nil // the machine is closing: no guest to interrupt
	}
	for {
		_, err := unix.Write(l.fd, one[:])
		switch err {
		case nil, unix.EAGAIN: // EAGAIN: the counter is saturated, an edge is already pending
			return nil
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("trigger GSI %d: %w", l.gsi, err)
		}
	}
}

func (l *irqLine) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}
