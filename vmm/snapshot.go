package vmm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/smolvm/smol/devices/boottimer"
	"github.com/smolvm/smol/devices/serial"
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
	vmSectionVersion      = 2 // 2: the irqchip kind and the split irqchip's I/O APIC
	deviceSectionVersion  = 1
	legacySection         = "legacy"
	legacySectionVersion  = 1
	ramRunsSection        = "ram.runs" // a fork's []memory.Run
	ramRunsSectionVersion = 1
)

// SnapshotOptions says what a snapshot holds besides the machine's own
// state and RAM.
type SnapshotOptions struct {
	// Sections are the caller's own state (the smol package's machine
	// record), written beside the machine's under their names.
	Sections []Section
	// Disks copies every disk's contents into the file as regions disk.0,
	// disk.1, ... (sparsely), so the snapshot restores on a host that has
	// none of the machine's files (ReadDisk).
	Disks bool
}

// Section is a caller's state section of a snapshot.
type Section struct {
	Name    string
	Version uint32
	Value   any
}

// LegacyState is the PC devices' part of a snapshot: the serial port's
// registers and buffered bytes (the guest's 8250 driver keeps its own
// view of them) and the boot timer.
type LegacyState struct {
	Serial    serial.State
	BootTimer boottimer.State
}

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
// positions are stable), the guest's RAM, sparse, and what opts adds.
// Restore reads it back; the file format is package snapshot's.
func (m *Machine) Snapshot(path string, opts SnapshotOptions) error {
	if !m.Paused() {
		return ErrNotPaused
	}
	if err := m.savable(); err != nil {
		return err
	}
	// Whatever the guest wrote is in the disk files (a layer's bitmap
	// too), for this snapshot's disk regions and for a caller copying a
	// disk beside us while the machine stays paused.
	if err := m.FlushDisks(); err != nil {
		return err
	}
	w, err := m.stateWriter(path, opts.Sections)
	if err != nil {
		return err
	}
	if opts.Disks {
		for i := range m.spec.Disks {
			d := m.blkDisk(i)
			if d == nil {
				return fmt.Errorf("snapshot of disk %d: no such disk", i)
			}
			// Through the disk, not its file: a layer reads through its
			// bases.
			v := d.View()
			if err := w.Region(diskRegion(i), v, v.Size()); err != nil {
				return err
			}
		}
	}
	// By host offset (the memfd's layout, which a restore maps back), not
	// by guest address: above 3 GiB the two differ by the MMIO hole. From
	// the memfd where it has the contents: only touched pages are read.
	var ram io.ReaderAt = bytes.NewReader(m.mem.Bytes())
	if f := m.mem.ContentFile(); f != nil {
		defer f.Close()
		ram = f
	}
	return w.Commit(ram, int64(m.mem.Size()))
}

// diskRegion names disk i's region in a snapshot.
func diskRegion(i int) string { return fmt.Sprintf("disk.%d", i) }

// stateWriter starts a snapshot at path with every state section of the
// paused machine and the caller's.
func (m *Machine) stateWriter(path string, extra []Section) (*snapshot.Writer, error) {
	w, err := snapshot.NewWriter(path)
	if err != nil {
		return nil, err
	}
	for _, s := range extra {
		if err := w.Section(s.Name, s.Version, s.Value); err != nil {
			return nil, err
		}
	}
	vcpus, vm, err := m.CPUState()
	if err != nil {
		return nil, err
	}
	host := HostState{Arch: runtime.GOARCH, CPUVendor: cpuVendor(vcpus[0]), TSCKHz: vcpus[0].TSCKHz}
	if err := w.Section("host", hostSectionVersion, host); err != nil {
		return nil, err
	}
	if err := w.Section(machineSection, machineSectionVersion, MachineState{CPUs: m.cfg.CPUs, Memory: m.cfg.Memory, Devices: m.spec}); err != nil {
		return nil, err
	}
	for i, s := range vcpus {
		if err := w.Section(fmt.Sprintf("vcpu.%d", i), vcpuSectionVersion, s); err != nil {
			return nil, err
		}
	}
	if err := w.Section("vm", vmSectionVersion, vm); err != nil {
		return nil, err
	}
	if err := w.Section(legacySection, legacySectionVersion, m.legacy.state()); err != nil {
		return nil, err
	}
	for i, vd := range m.virtio {
		if err := w.Section(fmt.Sprintf("device.%d", i), deviceSectionVersion, deviceState(vd)); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// ForkState writes the paused machine's state, without its RAM, to a new
// file at path, freezes its RAM (memory.Guest.Freeze) and returns the
// sealed memfds that hold it: with the file, what RestoreFork needs to
// start a child in another process (handed over as open files, never by
// path). The parent may resume afterwards and run on as a sibling.
func (m *Machine) ForkState(path string, extra []Section) (ForkRAM, error) {
	if !m.Paused() {
		return ForkRAM{}, ErrNotPaused
	}
	if err := m.savable(); err != nil {
		return ForkRAM{}, err
	}
	w, err := m.stateWriter(path, extra)
	if err != nil {
		return ForkRAM{}, err
	}
	if err := m.mem.Freeze(); err != nil {
		return ForkRAM{}, err
	}
	base, overlay, runs, err := m.mem.ForkFiles()
	if err != nil {
		return ForkRAM{}, fmt.Errorf("fork: %w", err)
	}
	ram := ForkRAM{Base: base, Overlay: overlay}
	if len(runs) > 0 {
		err = w.Section(ramRunsSection, ramRunsSectionVersion, runs)
	}
	if err == nil {
		err = w.Commit(bytes.NewReader(nil), 0)
	}
	if err != nil {
		ram.Close()
		return ForkRAM{}, err
	}
	return ram, nil
}

// ForkRAM is a frozen machine's RAM as a fork's child in another process
// maps it (memory.NewFork): the sealed memfd of the first fork point in
// its line and, where the machine changed since, a sealed overlay memfd
// mapped over the ranges the state file lists (section ram.runs).
type ForkRAM struct {
	Base    *os.File
	Overlay *os.File // nil: nothing is read from an overlay
}

// Files are the descriptors to hand a child's process, in order.
func (r ForkRAM) Files() []*os.File {
	if r.Overlay == nil {
		return []*os.File{r.Base}
	}
	return []*os.File{r.Base, r.Overlay}
}

// Close closes both files.
func (r ForkRAM) Close() {
	for _, f := range r.Files() {
		if f != nil {
			f.Close()
		}
	}
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

// ErrSharesNotSavable refuses a snapshot or fork of a machine with host
// directories: the files its guest has open in them are this VMM's
// descriptors, which no file or other process can take over.
var ErrSharesNotSavable = errors.New("a machine with host directories (-v) cannot be snapshotted, forked or packed live")

// ErrGPUNotSavable refuses a snapshot or fork of a machine with a
// display: the host's copies of its resources are not part of the
// snapshot format yet, and a restored guest driver would find them gone.
var ErrGPUNotSavable = errors.New("a machine with a display (--gpu) cannot be snapshotted, forked or packed live")

func (m *Machine) savable() error {
	if len(m.spec.Shares) > 0 {
		return ErrSharesNotSavable
	}
	if m.spec.GPU != nil {
		return ErrGPUNotSavable
	}
	return nil
}
