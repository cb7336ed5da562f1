package vmm

import (
	"fmt"
	"os"
	"sync"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/vmm/acpi"
	"golang.org/x/sys/unix"
)

// Where virtio-mmio devices live: device i gets a register window at
// virtioMMIOBase + i*virtio.MMIOWindowSize, in the MMIO hole below 4 GiB, and
// I/O APIC pin virtioFirstGSI + i. The guest finds them in the DSDT.
const (
	virtioMMIOBase   = 0xd000_0000
	virtioFirstGSI   = 5
	MaxVirtioDevices = 16 // pins 5..20 of the 24-pin I/O APIC
)

func virtioSlot(i int) (addr uint64, gsi uint32) {
	return virtioMMIOBase + uint64(i)*virtio.MMIOWindowSize, virtioFirstGSI + uint32(i)
}

// virtioACPI describes n virtio-mmio devices for the DSDT.
func virtioACPI(n int) []acpi.VirtioMMIODevice {
	var out []acpi.VirtioMMIODevice
	for i := 0; i < n; i++ {
		addr, gsi := virtioSlot(i)
		out = append(out, acpi.VirtioMMIODevice{Addr: addr, Size: virtio.MMIOWindowSize, GSI: gsi})
	}
	return out
}

// virtioDevice is one device on its transport, with the eventfds through
// which KVM reports the driver's queue notifications.
type virtioDevice struct {
	transport *virtio.MMIO
	irq       *irqLine
	kicks     []*os.File
	pollers   sync.WaitGroup
}

// addVirtioDevices puts each device on a virtio-mmio transport, wires its
// interrupt to an irqfd and its queue notifications to ioeventfds, so that
// neither direction needs a trip through a vCPU thread.
func (m *Machine) addVirtioDevices() error {
	if len(m.devices) > MaxVirtioDevices {
		return fmt.Errorf("%d virtio devices: smol supports at most %d", len(m.devices), MaxVirtioDevices)
	}
	for i, dev := range m.devices {
		addr, gsi := virtioSlot(i)
		irq, err := newIRQLine(m.vm, gsi)
		if err != nil {
			return err
		}
		vd := &virtioDevice{transport: virtio.NewMMIO(dev, m.mem, irq), irq: irq}
		m.virtio = append(m.virtio, vd)
		m.deviceInfo = append(m.deviceInfo, DeviceInfo{
			Kind: kindOf(dev), Bus: "mmio", Addr: addr, Size: virtio.MMIOWindowSize, GSI: gsi,
			Identity: identityOf(dev),
		})
		if err := m.mmio.Register(addr, virtio.MMIOWindowSize, vd.transport); err != nil {
			return err
		}
		for q := range dev.QueueSizes() {
			if err := vd.wireNotify(m.vm, addr+virtio.NotifyOffset, q); err != nil {
				return fmt.Errorf("virtio device %d queue %d: %w", i, q, err)
			}
		}
	}
	return nil
}

// wireNotify makes a guest write of q to the QueueNotify register signal an
// eventfd inside KVM, and starts the goroutine that passes it on.
func (vd *virtioDevice) wireNotify(vm *kvm.VM, notifyAddr uint64, q int) error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	err = vm.IOEventFD(kvm.IOEventFD{Addr: notifyAddr, Len: 4, Datamatch: uint64(q), FD: int32(fd), Flags: kvm.IOEventFDDatamatch})
	if err != nil {
		unix.Close(fd)
		return err
	}
	// os.NewFile on a non-blocking fd hands it to Go's poller: the Read
	// below parks the goroutine, not a thread.
	kick := os.NewFile(uintptr(fd), "virtio-notify")
	vd.kicks = append(vd.kicks, kick)
	vd.pollers.Add(1)
	go func() {
		defer vd.pollers.Done()
		var buf [8]byte
		for {
			if _, err := kick.Read(buf[:]); err != nil {
				return // closed: the machine is shutting down
			}
			vd.transport.QueueNotify(q)
		}
	}()
	return nil
}

// close stops the device's work and releases its host resources.
func (vd *virtioDevice) close() {
	for _, k := range vd.kicks {
		k.Close()
	}
	vd.pollers.Wait()
	vd.transport.Reset()
	closeDevice(vd.transport.Device())
	vd.irq.close()
}

// closeDevice releases a device's host resources (files, sockets, locks)
// if it holds any.
func closeDevice(dev virtio.Device) {
	switch c := dev.(type) {
	case interface{ Close() }:
		c.Close()
	case interface{ Close() error }:
		c.Close()
	}
}
