package vmm

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/snapshot"
	"github.com/smolvm/smol/virtio/balloon"
	"github.com/smolvm/smol/virtio/blk"
	vnet "github.com/smolvm/smol/virtio/net"
	"github.com/smolvm/smol/virtio/vsock"
	"github.com/smolvm/smol/vmm/acpi"
	"github.com/smolvm/smol/vmm/memory"
)

// restoreSource is what New needs to rebuild a machine from a snapshot.
type restoreSource struct {
	memory  *memory.Guest
	vcpus   []VCPUState
	vm      VMState
	legacy  *LegacyState // nil: fresh legacy devices (an in-process fork copies none)
	devices []DeviceState
}

// Restore builds a machine from the snapshot at path, ready to Start: its
// shape comes from the snapshot, its RAM is a private mapping of the
// snapshot's RAM region (read as the guest touches it; its writes stay
// its own), and every vCPU, the VM and each device continue where they
// were saved. cfg supplies the console and the egress log and, if it has
// any, the devices' host side (disk files, the vsock socket), which must
// match the snapshot's in kind and order; without, the snapshot's own are
// opened. A snapshot from another architecture or CPU vendor, of another
// format or section version, or damaged, is refused with one line.
func Restore(path string, cfg Config) (*Machine, error) {
	return restore(path, nil, cfg)
}

// RestoreFork builds a fork's child from the state file and the sealed
// RAM that the parent's ForkState gave, as Restore does: the child's RAM
// is a private mapping of the memfds, so nothing is copied. The files
// stay the caller's to close.
func RestoreFork(path string, ram ForkRAM, cfg Config) (*Machine, error) {
	if ram.Base == nil {
		return nil, errors.New("restore of a fork without its RAM")
	}
	return restore(path, &ram, cfg)
}

func restore(path string, ram *ForkRAM, cfg Config) (*Machine, error) {
	r, err := snapshot.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var host HostState
	var ms MachineState
	if err := r.Section("host", hostSectionVersion, &host); err != nil {
		return nil, err
	}
	if err := r.Section(machineSection, machineSectionVersion, &ms); err != nil {
		return nil, err
	}
	if host.Arch != runtime.GOARCH {
		return nil, fmt.Errorf("snapshot %s was taken on %s, this host is %s", path, host.Arch, runtime.GOARCH)
	}
	if ms.CPUs < 1 || ms.CPUs > acpi.MaxCPUs || ms.Memory < MinMemory || ms.Memory%memory.PageSize != 0 {
		return nil, fmt.Errorf("snapshot %s: machine of %d vCPUs and %d bytes is out of range", path, ms.CPUs, ms.Memory)
	}
	src := &restoreSource{vcpus: make([]VCPUState, ms.CPUs)}
	for i := range src.vcpus {
		if err := r.Section(fmt.Sprintf("vcpu.%d", i), vcpuSectionVersion, &src.vcpus[i]); err != nil {
			return nil, err
		}
	}
	if vendor := hostCPUVendor(); vendor != "" && cpuVendor(src.vcpus[0]) != vendor {
		return nil, &HostCPUError{fmt.Sprintf("snapshot %s was taken on a %s CPU, this host's is %s", path, cpuVendor(src.vcpus[0]), vendor)}
	}
	if err := r.Section("vm", vmSectionVersion, &src.vm); err != nil {
		return nil, err
	}
	src.legacy = new(LegacyState)
	if err := r.Section(legacySection, legacySectionVersion, src.legacy); err != nil {
		return nil, err
	}
	for i := 0; r.Has(fmt.Sprintf("device.%d", i)); i++ {
		var ds DeviceState
		if err := r.Section(fmt.Sprintf("device.%d", i), deviceSectionVersion, &ds); err != nil {
			return nil, err
		}
		src.devices = append(src.devices, ds)
	}
	f, off, length := r.RAM()
	var runs []memory.Run
	switch {
	case ram != nil && length != 0:
		return nil, fmt.Errorf("snapshot %s has its own RAM: it is no fork's", path)
	case ram == nil && uint64(length) != ms.Memory:
		return nil, fmt.Errorf("snapshot %s: %d bytes of RAM for a machine of %d", path, length, ms.Memory)
	case ram != nil && r.Has(ramRunsSection):
		if err := r.Section(ramRunsSection, ramRunsSectionVersion, &runs); err != nil {
			return nil, err
		}
	}
	if cfg.Devices, err = hostSide(ms.Devices, cfg.Devices); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if ram != nil {
		src.memory, err = memory.NewFork(ram.Base, ram.Overlay, runs, ms.Memory)
	} else {
		src.memory, err = memory.NewPrivate(f, off, ms.Memory)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	cfg.CPUs, cfg.Memory, cfg.restore = ms.CPUs, ms.Memory, src
	m, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err) // New closed the memory
	}
	return m, nil
}

// restoreState sets the saved vCPU, VM and device state on a machine New
// just built (nothing runs yet).
func (m *Machine) restoreState(src *restoreSource) error {
	fresh, err := m.vcpus[0].fd.CPUID()
	if err != nil {
		return err
	}
	if err := checkHostFeatures(src.vcpus[0].CPUID, fresh.Entries); err != nil {
		return err
	}
	if err := m.RestoreCPUState(src.vcpus, src.vm); err != nil {
		return err
	}
	if src.legacy != nil {
		if err := m.legacy.restore(*src.legacy); err != nil {
			return err
		}
	}
	// The guest was stopped between the snapshot and now, as after a
	// pause.
	m.tellGuestItWasPaused()
	if len(src.devices) != len(m.virtio) {
		return fmt.Errorf("the snapshot has %d devices, the machine %d", len(src.devices), len(m.virtio))
	}
	for i, vd := range m.virtio {
		if err := restoreDevice(vd, src.devices[i]); err != nil {
			return fmt.Errorf("device %d (%s): %w", i, src.devices[i].Kind, err)
		}
	}
	return nil
}

// restoreDevice loads a device's own state, then its transport's, which
// re-activates it on its saved queues if the driver had it running.
func restoreDevice(vd *virtioDevice, s DeviceState) error {
	dev := vd.transport.Device()
	if kind := kindOf(dev); kind != s.Kind {
		return fmt.Errorf("a %s device where the snapshot has a %s", kind, s.Kind)
	}
	var err error
	switch d := dev.(type) {
	case *blk.Device:
		err = restoreWith(s.Blk, d.Restore)
	case *vnet.Device:
		err = restoreWith(s.Net, d.Restore)
	case *vsock.Device:
		err = restoreWith(s.Vsock, d.Restore)
	case *balloon.Device:
		err = restoreWith(s.Balloon, d.Restore)
	}
	if err != nil {
		return err
	}
	return vd.transport.Restore(s.Transport)
}

// hostSide is the devices a restored machine opens: given's host side
// (files, sockets) with saved's guest-visible identities, or saved itself
// when given describes none. Anything the guest would see differently (a
// disk more or less, read-only or not, another kind of network) is
// refused: the guest's drivers hold state about the devices it had.
func hostSide(saved, given Devices) (Devices, error) {
	if len(given.Disks) == 0 && given.Net == nil && given.Vsock == nil && !given.Entropy && !given.Balloon {
		return saved, nil
	}
	if len(given.Disks) != len(saved.Disks) || (given.Net == nil) != (saved.Net == nil) || (given.Vsock == nil) != (saved.Vsock == nil) ||
		given.Entropy != saved.Entropy || given.Balloon != saved.Balloon {
		return Devices{}, errors.New("the devices given differ from the snapshot's")
	}
	out := given
	out.Disks = append([]Disk(nil), given.Disks...)
	for i, d := range saved.Disks {
		if out.Disks[i].ReadOnly != d.ReadOnly {
			return Devices{}, fmt.Errorf("disk %d is read-only in one and not the other", i)
		}
		out.Disks[i].Serial = d.Serial
	}
	if saved.Net != nil {
		if (saved.Net.TAP == "") != (given.Net.TAP == "") {
			return Devices{}, errors.New("the snapshot's network is of another kind")
		}
		n := *given.Net
		n.MAC = saved.Net.MAC
		out.Net = &n
	}
	if saved.Vsock != nil {
		v := *given.Vsock
		v.CID = saved.Vsock.CID
		out.Vsock = &v
	}
	return out, nil
}

func restoreWith[T any](s *T, restore func(T) error) error {
	if s == nil {
		return errors.New("the snapshot has no state for it")
	}
	return restore(*s)
}

// hostCPUVendor is this host's CPUID vendor string, as KVM reports it.
func hostCPUVendor() string {
	c, err := hostSupportedCPUID()
	if err != nil {
		return ""
	}
	return cpuVendor(VCPUState{CPUID: c})
}

func hostSupportedCPUID() ([]kvm.CPUIDEntry, error) {
	sys, err := kvm.Open()
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	c, err := sys.SupportedCPUID()
	if err != nil {
		return nil, err
	}
	return c.Entries, nil
}
