package vmm

import (
	"fmt"
	"runtime"

	"github.com/smolvm/smol/snapshot"
	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/balloon"
	"github.com/smolvm/smol/virtio/blk"
	vnet "github.com/smolvm/smol/virtio/net"
	"github.com/smolvm/smol/virtio/vsock"
)

// Versions of the snapshot sections this package writes; a change to one
// of the state structs gets a new version.
const (
	hostSectionVersion    = 1
	machineSection        = "machine"
	machineSectionVersion = 1
	vcpuSectionVersion    = 1
	vmSectionVersion      = 1
	deviceSectionVersion  = 1
)

// HostState says where a snapshot was taken, so that a restore can refuse
// a host that cannot run it.
type HostState struct {
	Arch      string
	CPUVendor string // CPUID leaf 0's vendor string
	TSCKHz    uint32
}

// MachineState is the machine's shape and its device description, from
// which a restore builds the same machine.
type MachineState struct {
	CPUs    int
	Memory  uint64
	Devices Devices
}

// DeviceState is one virtio device's part of a snapshot: its transport's
// registers and queues and, for devices that have any, its own state.
type DeviceState struct {
	Kind      string
	Transport virtio.MMIOState
	Blk       *blk.State     `json:",omitempty"`
	Net       *vnet.State    `json:",omitempty"`
	Vsock     *vsock.State   `json:",omitempty"`
	Balloon   *balloon.State `json:",omitempty"`
}

// Snapshot writes the paused machine's state to a new file at path: the
// host, the machine's shape and devices, every vCPU, the VM's clock and
// interrupt controllers, every device (its worker parked, so its queue
// positions are stable), and the guest's RAM, sparse. A restore of it is
// the next step of this work; the file format is package snapshot's.
func (m *Machine) Snapshot(path string) error {
	if !m.Paused() {
		return ErrNotPaused
	}
	w, err := snapshot.NewWriter(path)
	if err != nil {
		return err
	}
	vcpus, vm, err := m.CPUState()
	if err != nil {
		return err
	}
	host := HostState{Arch: runtime.GOARCH, CPUVendor: cpuVendor(vcpus[0]), TSCKHz: vcpus[0].TSCKHz}
	if err := w.Section("host", hostSectionVersion, host); err != nil {
		return err
	}
	if err := w.Section(machineSection, machineSectionVersion, MachineState{CPUs: m.cfg.CPUs, Memory: m.cfg.Memory, Devices: m.spec}); err != nil {
		return err
	}
	for i, s := range vcpus {
		if err := w.Section(fmt.Sprintf("vcpu.%d", i), vcpuSectionVersion, s); err != nil {
			return err
		}
	}
	if err := w.Section("vm", vmSectionVersion, vm); err != nil {
		return err
	}
	for i, vd := range m.virtio {
		if err := w.Section(fmt.Sprintf("device.%d", i), deviceSectionVersion, deviceState(vd)); err != nil {
			return err
		}
	}
	return w.Commit(m.mem, int64(m.mem.Size()))
}

func deviceState(vd *virtioDevice) DeviceState {
	dev := vd.transport.Device()
	s := DeviceState{Kind: kindOf(dev), Transport: vd.transport.State()}
	switch d := dev.(type) {
	case *blk.Device:
		st := d.State()
		s.Blk = &st
	case *vnet.Device:
		st := d.State()
		s.Net = &st
	case *vsock.Device:
		st := d.State()
		s.Vsock = &st
	case *balloon.Device:
		st := d.State()
		s.Balloon = &st
	}
	return s
}

// cpuVendor is the vendor string of CPUID leaf 0 in s's CPUID table.
func cpuVendor(s VCPUState) string {
	for _, e := range s.CPUID {
		if e.Function == 0 {
			b := make([]byte, 0, 12)
			for _, r := range []uint32{e.EBX, e.EDX, e.ECX} {
				b = append(b, byte(r), byte(r>>8), byte(r>>16), byte(r>>24))
			}
			return string(b)
		}
	}
	return ""
}
