// Package smol runs Linux microVMs: each workload gets its own kernel in its
// own KVM virtual machine, booted directly with no firmware.
//
// This package is the embedding API; the smol command is a thin layer over
// it:
//
//	m, err := smol.Start(smol.Config{Kernel: "build/vmlinux", Console: os.Stdout})
//	if err != nil { ... }
//	exit, err := m.Wait()
//
// Start validates everything it can before the guest runs (kernel format,
// sizes, the host's KVM) and returns errors meant to be shown to a user as
// one line.
package smol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/netdev/gateway"
	"github.com/smolvm/smol/virtio/balloon"
	"github.com/smolvm/smol/vmm"
	"github.com/smolvm/smol/vmm/acpi"
)

// Defaults for a Config's zero values.
const (
	DefaultCPUs   = 4
	DefaultMemory = 8 << 30 // taken from the host only as the guest touches it
)

// The limits of a Config's shape.
const (
	MaxCPUs   = acpi.MaxCPUs  // what the ACPI tables can describe
	MinMemory = vmm.MinMemory // below it no Linux boots
)

// DefaultCmdline is put before Config.Cmdline: the serial console, and
// reboot and panic behaviour that end the VM instead of hanging it. Later
// parameters win, so a Config can override any of these.
const DefaultCmdline = "console=ttyS0 reboot=k panic=-1 i8042.noaux i8042.nomux i8042.dumbkbd quiet"

// Config describes a VM.
type Config struct {
	Kernel  string // vmlinux or bzImage; "" means DefaultKernel()
	Initrd  string // optional initramfs
	Cmdline string // appended to DefaultCmdline
	CPUs    int    // 0 means DefaultCPUs
	Memory  uint64 // bytes; 0 means DefaultMemory

	Console      io.Writer // guest serial output; nil discards it
	ConsoleInput io.Reader // typed into the guest's serial port; may be nil

	Disks []Disk // virtio block devices: /dev/vda, /dev/vdb, ...
	// Volumes are host directories the guest's agent mounts (RunCommand
	// and machines; a bare boot gets the devices, tagged smol0, smol1, ...).
	Volumes []Volume
	Net     *Net   // optional network: smol's userspace gateway, or a host TAP
	Vsock   *Vsock // optional host<->guest sockets
	// GPU gives the guest a display (virtio-gpu: /dev/dri/card0 and
	// /dev/fb0) that Machine.Screenshot reads; nil: none.
	GPU *GPU
	// EgressLog receives the gateway's egress log, one JSON line per flow
	// and per denied name (gateway.Event); nil discards it.
	EgressLog io.Writer

	// NoBalloon leaves out the balloon device, through which memory the
	// guest frees goes back to the host (free page reporting).
	NoBalloon bool
	// NoEntropy leaves out the virtio entropy device (/dev/hwrng). With
	// NoBalloon it gives a guest with no device it did not ask for, which
	// is how benchmarks measure what the default devices cost.
	NoEntropy bool
	// IRQChip is where the interrupt controllers live: "split" (the
	// default: only the local APICs in KVM, an I/O APIC in the VMM) or
	// "kernel" (PIC, I/O APIC and PIT in KVM too); see vmm.IRQChip.
	IRQChip string
}

// DefaultIRQChip is the irqchip a Config without one gets.
const DefaultIRQChip = vmm.DefaultIRQChip

// ParseIRQChip checks a user's choice of irqchip ("split" or "kernel").
func ParseIRQChip(s string) (vmm.IRQChip, error) { return vmm.ParseIRQChip(s) }

// Disk is a raw disk image given to the guest as a virtio block device.
// The first disk is /dev/vda, the second /dev/vdb, and so on.
type Disk = vmm.Disk

// GPU is a display of Width x Height pixels (zero: 1280x800), see vmm.GPU.
type GPU = vmm.GPU

// Vsock gives the guest a virtio-vsock device whose host side is Unix
// sockets (see vmm.Vsock).
type Vsock = vmm.Vsock

// Net gives the guest a network device: by default behind smol's
// userspace gateway, with an optional egress policy (AllowHosts,
// AllowCIDRs); with TAP set, on a host TAP interface instead (see vmm.Net).
// Behind the gateway, a guest running smol's agent configures itself
// (address, route, resolver) at boot.
type Net = vmm.Net

// Exit describes how a VM ended.
type Exit struct {
	// Reason is "poweroff", "reboot" or "stopped" (Stop was called). A crash
	// is reported as an error from Wait instead.
	Reason string
}

// Machine is a running VM.
type Machine struct {
	vm *vmm.Machine
}

// Start boots a VM and returns once its vCPUs run.
func Start(cfg Config) (*Machine, error) {
	vols, err := checkVolumes(cfg.Volumes)
	if err != nil {
		return nil, err
	}
	cfg.Volumes = vols
	if cfg.Kernel == "" {
		k, err := DefaultKernel()
		if err != nil {
			return nil, err
		}
		cfg.Kernel = k
	}
	vm, err := vmm.New(cfg.vmmConfig())
	if err != nil {
		return nil, err
	}
	return run(vm)
}

// run starts a built VM's vCPUs.
func run(vm *vmm.Machine) (*Machine, error) {
	if err := vm.Start(); err != nil {
		vm.Close()
		return nil, err
	}
	return &Machine{vm: vm}, nil
}

// vmmConfig fills in cfg's defaults (but the kernel's) and translates it
// for package vmm.
func (cfg Config) vmmConfig() vmm.Config {
	if cfg.CPUs == 0 {
		cfg.CPUs = DefaultCPUs
	}
	if cfg.Memory == 0 {
		cfg.Memory = DefaultMemory
	}
	cmdline := DefaultCmdline
	if cfg.Net != nil && cfg.Net.TAP == "" {
		// For the agent (guest/agent/net.go): the guest's side of the
		// gateway's link.
		cmdline += fmt.Sprintf(" smol.net=%s/%d,%s", gateway.GuestIP, gateway.Subnet.Bits(), gateway.GatewayIP)
	}
	shares, mounts := volumeDevices(cfg.Volumes)
	if mounts != "" {
		cmdline += " " + mounts
	}
	if c := strings.TrimSpace(cfg.Cmdline); c != "" {
		cmdline += " " + c
	}
	return vmm.Config{
		Kernel:       cfg.Kernel,
		Initrd:       cfg.Initrd,
		Cmdline:      cmdline,
		CPUs:         cfg.CPUs,
		Memory:       cfg.Memory,
		Console:      cfg.Console,
		ConsoleInput: cfg.ConsoleInput,
		EgressLog:    cfg.EgressLog,
		IRQChip:      vmm.IRQChip(cfg.IRQChip),
		Devices: vmm.Devices{
			Disks:   cfg.Disks,
			Shares:  shares,
			Net:     cfg.Net,
			Vsock:   cfg.Vsock,
			Entropy: !cfg.NoEntropy,
			Balloon: !cfg.NoBalloon,
			GPU:     cfg.GPU,
		},
	}
}

// Run boots a VM and waits for it to end.
func Run(cfg Config) (Exit, error) {
	m, err := Start(cfg)
	if err != nil {
		return Exit{}, err
	}
	defer m.Close()
	return m.Wait()
}

// Wait blocks until the VM ends. A guest crash (triple fault, KVM failure)
// is an error describing the vCPU's registers.
func (m *Machine) Wait() (Exit, error) {
	reason, err := m.vm.Wait()
	if err != nil {
		return Exit{Reason: reason.String()}, fmt.Errorf("guest crashed: %w", err)
	}
	return Exit{Reason: reason.String()}, nil
}

// Pause parks every vCPU outside the guest (its last exit completed)
// until Resume: the guest's code stands still and its vCPUs use no host
// CPU. Pausing a paused VM does nothing.
func (m *Machine) Pause() error { return m.vm.Pause() }

// Resume lets a paused VM run again.
func (m *Machine) Resume() error { return m.vm.Resume() }

// Stop ends the VM at once, like pulling its power cord. Wait then returns.
func (m *Machine) Stop() { m.vm.Stop() }

// Done is closed when the VM has ended.
func (m *Machine) Done() <-chan struct{} { return m.vm.Done() }

// Close stops the VM if it runs and releases its resources.
func (m *Machine) Close() error { return m.vm.Close() }

// BootTimes are milestones of a boot, measured in the VMM.
type BootTimes struct {
	FirstRun  time.Time // vCPU 0 first entered the guest
	Userspace time.Time // the guest's init wrote the boot timer port; zero if it never did
}

// BootTimes returns the boot milestones reached so far.
func (m *Machine) BootTimes() BootTimes {
	return BootTimes{FirstRun: m.vm.FirstRun(), Userspace: m.vm.UserspaceReached()}
}

// ExitStat counts vCPU exits of one kind at one address.
type ExitStat = vmm.ExitStat

// ExitStats returns the VM's exits to the VMM, most frequent first; valid
// once the VM has ended. Every exit costs a round trip through the host, so
// this is where to look when a guest boots or runs slowly.
func (m *Machine) ExitStats() []ExitStat { return m.vm.ExitStats() }

// KVMStat is one of KVM's own counters for the VM ("vm.remote_tlb_flush")
// or summed over its vCPUs ("vcpu.exits").
type KVMStat = kvm.Stat

// KVMStats returns KVM's nonzero counters for the VM, largest first: what
// the guest did that KVM handled without the VMM (interrupt and page-fault
// exits, emulated instructions, halts). Valid until Close.
func (m *Machine) KVMStats() ([]KVMStat, error) { return m.vm.KVMStats() }

// MemoryStats are the guest's own memory statistics, from the balloon.
type MemoryStats = balloon.Stats

// MemoryStats asks the guest for fresh memory statistics and waits for them
// (at most until ctx is done). The guest driver sends them once it is up.
func (m *Machine) MemoryStats(ctx context.Context) (MemoryStats, error) {
	b := m.vm.Balloon()
	if b == nil {
		return MemoryStats{}, errors.New("this VM has no balloon device")
	}
	s, _, err := b.RefreshStats(ctx)
	return s, err
}

// ReclaimedBytes is how much guest memory the balloon has handed back to the
// host so far (free pages the guest reported, and pages it gave up).
func (m *Machine) ReclaimedBytes() uint64 {
	b := m.vm.Balloon()
	if b == nil {
		return 0
	}
	c := b.Counters()
	return c.DiscardedBytes()
}
