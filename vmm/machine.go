package vmm

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/devices/ioapic"
	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/balloon"
	"github.com/smolvm/smol/virtio/input"
	"github.com/smolvm/smol/vmm/acpi"
	"github.com/smolvm/smol/vmm/boot"
	"github.com/smolvm/smol/vmm/memory"
)

// Config describes a machine to boot.
type Config struct {
	Kernel  string // vmlinux (ELF, PVH or 64-bit entry) or bzImage
	Initrd  string // optional initramfs
	Cmdline string // kernel command line, complete
	CPUs    int
	Memory  uint64 // bytes of guest RAM, a multiple of 4 KiB

	// Console receives the guest's serial output; nil discards it.
	Console io.Writer
	// ConsoleInput, if set, is typed into the guest's serial port.
	ConsoleInput io.Reader

	// Devices describes the virtio devices; the machine's device manager
	// builds them (and the legacy devices) and owns them until Close.
	Devices Devices
	// EgressLog receives the network gateway's egress log (JSON lines);
	// nil discards it.
	EgressLog io.Writer
	// IRQChip says where the interrupt controllers live; empty means
	// DefaultIRQChip. A restored machine gets its snapshot's.
	IRQChip IRQChip

	// restore, set by Restore, rebuilds a snapshotted machine instead of
	// loading a kernel.
	restore *restoreSource
}

// StopReason says why a machine stopped.
type StopReason int

const (
	StopPoweroff  StopReason = iota // the guest powered off
	StopReboot                      // the guest asked for a reset; smol does not restart it
	StopRequested                   // the host called Stop
	StopCrash                       // the guest crashed or KVM failed; Wait returns the error
)

func (r StopReason) String() string {
	switch r {
	case StopPoweroff:
		return "poweroff"
	case StopReboot:
		return "reboot"
	case StopRequested:
		return "stopped"
	case StopCrash:
		return "crash"
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// Fixed machine facts.
const (
	// tssAddr and identityMapAddr are three pages KVM needs on Intel hosts
	// for real-mode emulation; they sit just below the BIOS ROM, in the MMIO
	// hole, away from RAM and from devices.
	tssAddr         = 0xfffb_d000
	identityMapAddr = 0xfffb_c000
	// pitSpeakerDummy makes KVM's PIT ignore the PC speaker port.
	pitSpeakerDummy = 1
	// MinMemory is the smallest RAM smol accepts: below it no Linux boots.
	MinMemory = 32 << 20
)

// Machine is one virtual machine.
type Machine struct {
	cfg   Config
	sys   *kvm.System
	vm    *kvm.VM
	mem   *memory.Guest
	pio   *Bus
	mmio  *Bus
	vcpus []*vcpu
	entry *boot.Entry

	// The device manager's state: what it built from cfg.Devices and
	// where it put each device.
	spec       Devices // cfg.Devices with identities filled in
	legacy     *legacyDevices
	ioapic     *ioapic.IOAPIC  // the split irqchip's; nil with the in-kernel one
	devices    []virtio.Device // in guest order
	virtio     []*virtioDevice // devices[i] on its transport, once wired
	balloon    *balloon.Device // also in devices; nil without one
	gpu        *gpu.Device     // also in devices; nil without one
	keyboard   *input.Device   // with gpu
	tablet     *input.Device   // with gpu
	deviceInfo []DeviceInfo

	processStart time.Time
	firstRun     atomic.Int64  // unix nanos of vCPU 0's first KVM_RUN
	memslotTime  time.Duration // spent in KVM_SET_USER_MEMORY_REGION

	stopping atomic.Bool
	pause    pauser
	mu       sync.Mutex
	reason   StopReason
	err      error
	done     chan struct{}
	started  bool
	closed   bool
}

// New creates a machine ready to Start: VM, memory, interrupt controllers,
// devices and vCPUs exist and the kernel is loaded.
func New(cfg Config) (_ *Machine, err error) {
	if cfg.CPUs < 1 {
		return nil, fmt.Errorf("%d vCPUs: a machine needs at least 1", cfg.CPUs)
	}
	if cfg.CPUs > acpi.MaxCPUs {
		// The MADT describes xAPIC IDs, one byte with 255 meaning broadcast.
		return nil, fmt.Errorf("%d vCPUs is above smol's limit of %d", cfg.CPUs, acpi.MaxCPUs)
	}
	if cfg.Memory < MinMemory {
		return nil, fmt.Errorf("%d MiB of guest memory is too small: a Linux guest needs at least %d MiB", cfg.Memory>>20, MinMemory>>20)
	}
	if cfg.Memory%memory.PageSize != 0 {
		return nil, fmt.Errorf("guest memory of %d bytes is not a multiple of 4 KiB", cfg.Memory)
	}
	if cfg.restore != nil {
		cfg.IRQChip = cfg.restore.vm.IRQChip
	}
	if cfg.IRQChip, err = ParseIRQChip(string(cfg.IRQChip)); err != nil {
		return nil, err
	}
	m := &Machine{cfg: cfg, pio: NewBus("pio"), mmio: NewBus("mmio"), done: make(chan struct{})}
	m.pause.cond = sync.NewCond(&m.pause.mu)
	defer func() {
		if err != nil {
			m.Close()
			// Devices the machine did not get to wire are still the
			// machine's to release.
			for _, dev := range m.devices[len(m.virtio):] {
				closeDevice(dev)
			}
		}
	}()
	trace("vmm.New")
	if cfg.restore != nil {
		m.mem = cfg.restore.memory
	} else if m.mem, err = memory.New(cfg.Memory); err != nil {
		return nil, err
	}
	if m.devices, m.spec, err = openVirtio(cfg.Devices, m.mem, cfg.EgressLog); err != nil {
		return nil, err
	}
	for _, dev := range m.devices {
		switch d := dev.(type) {
		case *balloon.Device:
			m.balloon = d
		case *gpu.Device:
			m.gpu = d
		case *input.Device:
			if d.Kind() == input.Tablet {
				m.tablet = d
			} else {
				m.keyboard = d
			}
		}
	}
	// Loading the kernel and initrd (mostly page faults on fresh guest
	// memory) overlaps with creating the VM, which is mostly ioctls: the two
	// together are the VMM's start-up time.
	loaded := make(chan error, 1)
	go func() {
		if cfg.restore != nil {
			loaded <- nil // the guest's memory already holds everything
			return
		}
		var err error
		m.entry, err = boot.Load(m.mem, boot.Config{
			Kernel:  cfg.Kernel,
			Initrd:  cfg.Initrd,
			Cmdline: cfg.Cmdline,
			ACPI:    acpiConfig(cfg.CPUs, len(m.devices), cfg.IRQChip),
		})
		trace("kernel and initrd loaded")
		loaded <- err
	}()
	hostErr := m.createKVMMachine()
	trace("KVM machine created")
	// A mistake in the user's input is reported first, on any host.
	if err := <-loaded; err != nil {
		return nil, err
	}
	if hostErr != nil {
		return nil, hostErr
	}
	if cfg.restore != nil {
		if err := m.restoreState(cfg.restore); err != nil {
			return nil, err
		}
		return m, nil
	}
	if err := m.setEntryState(m.vcpus[0].fd); err != nil {
		return nil, err
	}
	return m, nil
}

// createKVMMachine creates the KVM side: VM, RAM slots, devices, vCPUs.
func (m *Machine) createKVMMachine() (err error) {
	if err := CheckHost(); err != nil {
		return err
	}
	if m.sys, err = kvm.Open(); err != nil {
		return fmt.Errorf("%w: %v", ErrNoKVM, err)
	}
	maxCPUs, err := m.sys.CheckExtension(kvm.CapMaxVCPUs)
	if err != nil || maxCPUs <= 0 {
		maxCPUs, _ = m.sys.CheckExtension(kvm.CapNrVCPUs)
	}
	if maxCPUs > 0 && m.cfg.CPUs > maxCPUs {
		return fmt.Errorf("%d vCPUs is above this host's KVM limit of %d", m.cfg.CPUs, maxCPUs)
	}
	if err := m.createVM(); err != nil {
		return err
	}
	trace("VM and interrupt controllers created")
	slotsStart := time.Now()
	for slot, r := range m.mem.Regions() {
		region := kvm.UserMemoryRegion{
			Slot:          uint32(slot),
			GuestPhysAddr: r.GuestAddr,
			MemorySize:    r.Size,
			UserspaceAddr: hostAddr(m.mem.Bytes()[r.HostOffset:]),
		}
		if err := m.vm.SetUserMemoryRegion(region); err != nil {
			return fmt.Errorf("map guest RAM [%#x, +%#x): %w", r.GuestAddr, r.Size, err)
		}
	}
	m.memslotTime = time.Since(slotsStart)
	trace("guest RAM mapped")
	if m.legacy, err = m.addLegacyDevices(); err != nil {
		return err
	}
	if err := m.addVirtioDevices(); err != nil {
		return err
	}
	trace("devices wired")
	return m.createVCPUs()
}

// createVM makes the VM and its interrupt controllers.
func (m *Machine) createVM() error {
	var err error
	if m.vm, err = m.sys.CreateVM(); err != nil {
		return err
	}
	if err := m.vm.SetTSSAddr(tssAddr); err != nil {
		return err
	}
	if err := m.vm.SetIdentityMapAddr(identityMapAddr); err != nil {
		return err
	}
	return m.createIRQChip()
}

// createVCPUs creates every vCPU with its CPUID and local APIC wiring.
// vCPU 0 is put at the kernel's entry point later (setEntryState); the others
// wait in the wait-for-SIPI state until the guest kernel starts them.
func (m *Machine) createVCPUs() error {
	supported, err := supportedCPUID(m.sys)
	if err != nil {
		return err
	}
	for i := 0; i < m.cfg.CPUs; i++ {
		fd, err := m.vm.CreateVCPU(i)
		if err != nil {
			return fmt.Errorf("create vCPU %d: %w", i, err)
		}
		v := &vcpu{index: i, fd: fd, machine: m, exits: map[exitKey]uint64{}}
		m.vcpus = append(m.vcpus, v)
		if err := fd.SetCPUID(guestCPUID(supported, i, m.cfg.CPUs)); err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
		if err := wireLocalAPIC(fd); err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
	}
	return nil
}

func (m *Machine) setEntryState(fd *kvm.VCPU) error {
	sregs, err := fd.Sregs()
	if err != nil {
		return err
	}
	m.entry.SetupSregs(&sregs)
	if err := fd.SetSregs(sregs); err != nil {
		return err
	}
	if err := fd.SetRegs(m.entry.Regs); err != nil {
		return err
	}
	return fd.SetFPU(initialFPU())
}

// Start runs the vCPUs. It returns at once; Wait reports the end.
func (m *Machine) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("machine already started")
	}
	m.started = true
	if m.cfg.ConsoleInput != nil {
		m.legacy.attachInput(m.cfg.ConsoleInput)
	}
	var wg sync.WaitGroup
	for _, v := range m.vcpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reason, err := v.run()
			m.stop(reason, err)
		}()
	}
	go func() {
		wg.Wait()
		close(m.done)
	}()
	go releaseStartupPages()
	if DedicatedProcess {
		setGCPercent()
	}
	return nil
}

// stop records the first reason the machine stopped and stops every vCPU.
func (m *Machine) stop(reason StopReason, err error) {
	m.mu.Lock()
	first := !m.stopping.Load()
	if first {
		m.reason, m.err = reason, err
		m.stopping.Store(true)
		if !m.started {
			// Never started: there is no vCPU to wait for, and Wait
			// (and Done) must not block on one.
			m.started = true
			close(m.done)
		}
	}
	m.mu.Unlock()
	if first {
		for _, v := range m.vcpus {
			v.kick()
		}
		m.wakeParked()
	}
}

// Stop asks the machine to stop now, as if its power were cut.
func (m *Machine) Stop() { m.stop(StopRequested, nil) }

// Wait blocks until every vCPU has stopped and returns why. A crash is
// StopCrash with a *CrashError.
func (m *Machine) Wait() (StopReason, error) {
	<-m.done
	m.legacy.flush()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reason, m.err
}

// Done is closed when the machine has stopped.
func (m *Machine) Done() <-chan struct{} { return m.done }

// ExitStat counts the vCPU exits of one kind ("io", "mmio", "intr") at one
// address (port, guest physical address, or 0).
type ExitStat struct {
	Kind  string
	Addr  uint64
	Count uint64
}

// ExitStats returns how often the vCPUs left the guest for the VMM, most
// frequent first: the first place to look when a guest is slow. Valid after
// the machine has stopped.
func (m *Machine) ExitStats() []ExitStat {
	select {
	case <-m.done:
	default:
		return nil
	}
	total := map[exitKey]uint64{}
	for _, v := range m.vcpus {
		for k, n := range v.exits {
			total[k] += n
		}
	}
	stats := make([]ExitStat, 0, len(total))
	for k, n := range total {
		kind := strings.ToLower(strings.TrimPrefix(k.reason.String(), "Exit"))
		stats = append(stats, ExitStat{Kind: kind, Addr: k.addr, Count: n})
	}
	sort.Slice(stats, func(i, j int) bool {
		if stats[i].Count != stats[j].Count {
			return stats[i].Count > stats[j].Count
		}
		return stats[i].Addr < stats[j].Addr
	})
	return stats
}

// KVMStats returns KVM's own counters for the VM: its VM-wide statistics
// and the sum of its vCPUs', nonzero ones only, largest first. They show
// what the guest did inside the kernel (exits KVM handled itself, page
// faults, remote TLB flushes), which ExitStats cannot. Valid until Close.
func (m *Machine) KVMStats() ([]kvm.Stat, error) {
	if m.vm == nil {
		return nil, errors.New("the machine has no VM")
	}
	sums := map[string]uint64{}
	var order []string
	add := func(stats []kvm.Stat, prefix string) {
		for _, s := range stats {
			name := prefix + s.Name
			if _, seen := sums[name]; !seen {
				order = append(order, name)
			}
			sums[name] += s.Value
		}
	}
	vmStats, err := m.vm.Stats()
	if err != nil {
		return nil, err
	}
	add(vmStats, "vm.")
	for _, v := range m.vcpus {
		stats, err := v.fd.Stats()
		if err != nil {
			return nil, err
		}
		add(stats, "vcpu.")
	}
	var out []kvm.Stat
	for _, name := range order {
		if sums[name] != 0 {
			out = append(out, kvm.Stat{Name: name, Value: sums[name]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Value > out[j].Value })
	return out, nil
}

// FirstRun returns when vCPU 0 first entered the guest (zero if not yet).
func (m *Machine) FirstRun() time.Time {
	if ns := m.firstRun.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// MemslotTime is how long giving KVM the guest's RAM took (its memory
// slots): a cost that grows with the RAM's size on some hosts, which
// benchmarks report apart from the rest of creating a machine.
func (m *Machine) MemslotTime() time.Duration { return m.memslotTime }

// UserspaceReached returns when the guest's init wrote the boot timer port
// (zero if it has not).
func (m *Machine) UserspaceReached() time.Time { return m.legacy.bootTimer.Reached() }

// BootProtocol says how the kernel was entered ("pvh" or "linux64"), or
// "restored" for a machine restored from a snapshot.
func (m *Machine) BootProtocol() string {
	if m.entry == nil {
		return "restored"
	}
	return string(m.entry.Protocol)
}

// Balloon returns the balloon device, or nil when Config.Balloon was false.
func (m *Machine) Balloon() *balloon.Device { return m.balloon }

// GPU returns the display device, or nil when the machine has none.
func (m *Machine) GPU() *gpu.Device { return m.gpu }

// Keyboard and Tablet return the display's input devices, nil without a
// display.
func (m *Machine) Keyboard() *input.Device { return m.keyboard }
func (m *Machine) Tablet() *input.Device   { return m.tablet }

// Memory returns the guest's RAM.
func (m *Machine) Memory() *memory.Guest { return m.mem }

// Close releases everything. The machine must have stopped (or never started).
func (m *Machine) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	running := m.started
	m.mu.Unlock()
	if running {
		m.Stop()
		<-m.done
	}
	// A Pause or Resume still in progress (an API request racing the
	// machine's end) finishes before anything it touches is released.
	m.pause.mu.Lock()
	m.pause.closed = true
	m.pause.mu.Unlock()
	for _, vd := range m.virtio {
		vd.close()
	}
	if m.legacy != nil {
		m.legacy.close()
	}
	for _, v := range m.vcpus {
		v.fd.Close()
	}
	if m.vm != nil {
		m.vm.Close()
	}
	if m.mem != nil {
		m.mem.Close()
	}
	if m.sys != nil {
		m.sys.Close()
	}
	return nil
}
