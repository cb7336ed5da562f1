package vmm

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"

	"github.com/smolvm/smol/kvm"
	"golang.org/x/sys/unix"
)

// irqLine is a device interrupt delivered through a KVM irqfd: writing the
// eventfd makes KVM raise the GSI inside the kernel, so a device interrupts
// the guest without a vCPU exit and from any thread.
//
// A line is one of two kinds:
//
//   - edge (the serial port, as an ISA UART's): each Trigger is one pulse on
//     the pin.
//   - level (virtio devices): Trigger raises the pin and KVM holds it up
//     until the guest's EOI for the interrupt reaches the I/O APIC; KVM then
//     lowers it and signals the resample eventfd, and the line asks its
//     device (stillPending) whether to raise it again. This is the virtio
//     spec's model, a line that stays up while InterruptStatus is non-zero,
//     and what QEMU gives virtio-mmio. A pulse can be lost: one that arrives
//     while the guest is still in the handler of the last one leaves nothing
//     behind once the driver has read InterruptStatus, and the guest waits
//     forever for a completion that has happened.
type irqLine struct {
	gsi uint32
	fd  int

	// Level lines only.
	resample *os.File
	watcher  sync.WaitGroup
}

func newEdgeIRQLine(vm *kvm.VM, gsi uint32) (*irqLine, error) {
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

// newLevelIRQLine makes a level-triggered line. The line is not re-raised
// until watch is called.
func newLevelIRQLine(vm *kvm.VM, gsi uint32) (*irqLine, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd for GSI %d: %w", gsi, err)
	}
	rfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("resample eventfd for GSI %d: %w", gsi, err)
	}
	if err := vm.IRQFDResample(fd, rfd, gsi); err != nil {
		unix.Close(fd)
		unix.Close(rfd)
		return nil, fmt.Errorf("level-triggered irqfd for GSI %d: %w", gsi, err)
	}
	// os.NewFile on a non-blocking fd hands it to Go's poller: the watcher
	// parks a goroutine, not a thread.
	return &irqLine{gsi: gsi, fd: fd, resample: os.NewFile(uintptr(rfd), "irq-resample")}, nil
}

// watch starts passing the guest's acknowledgements of a level line to
// stillPending, which re-raises the line (through Trigger) if its device
// still has an interrupt the driver has not acknowledged.
func (l *irqLine) watch(stillPending func()) {
	if l.resample == nil {
		return
	}
	l.watcher.Add(1)
	go func() {
		defer l.watcher.Done()
		var buf [8]byte
		for {
			if _, err := l.resample.Read(buf[:]); err != nil {
				return // closed: the machine is shutting down
			}
			stillPending()
		}
	}()
}

// Trigger raises the line: one pulse on an edge line; on a level line, up
// until the guest's next EOI for it.
func (l *irqLine) Trigger() error {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	for {
		_, err := unix.Write(l.fd, one[:])
		switch err {
		case nil, unix.EAGAIN: // EAGAIN: the counter is saturated, a raise is already pending
			return nil
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("trigger GSI %d: %w", l.gsi, err)
		}
	}
}

// close stops the watcher, then releases the eventfds (KVM keeps its own
// references until the VM is closed).
func (l *irqLine) close() {
	if l.resample != nil {
		l.resample.Close()
		l.watcher.Wait()
	}
	unix.Close(l.fd)
}
