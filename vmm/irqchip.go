package vmm

import (
	"fmt"
	"log/slog"

	"github.com/smolvm/smol/devices/ioapic"
	"github.com/smolvm/smol/devices/portb"
	"github.com/smolvm/smol/kvm"
	"github.com/smolvm/smol/vmm/acpi"
)

// IRQChip says where a machine's interrupt controllers live.
type IRQChip string

const (
	// IRQChipSplit keeps only the local APICs in KVM; the I/O APIC is the
	// VMM's (devices/ioapic), device interrupts reach the local APICs as
	// MSIs that KVM injects straight from the devices' irqfds (an irqfd on
	// an I/O APIC pin goes through a kernel worker instead), and there is
	// no PIC or PIT (a hardware-reduced ACPI guest uses neither). It is
	// cloud-hypervisor's arrangement and QEMU microvm's default.
	IRQChipSplit IRQChip = "split"
	// IRQChipKernel puts the PIC pair, the I/O APIC and the PIT in KVM too,
	// as Firecracker does.
	IRQChipKernel IRQChip = "kernel"
)

// DefaultIRQChip is what a Config without an IRQChip gets: the in-kernel
// irqchip, the one every test and benchmark has run on. The split one
// boots as fast in the test box but did not make its guests more robust
// there (BENCHMARKS.md, "smol's own split irqchip does not end it"); it
// stays selectable until an alternated comparison or hardware KVM shows
// what it gains.
const DefaultIRQChip = IRQChipKernel

// ParseIRQChip checks a user's choice of irqchip.
func ParseIRQChip(s string) (IRQChip, error) {
	switch c := IRQChip(s); c {
	case IRQChipSplit, IRQChipKernel:
		return c, nil
	case "":
		return DefaultIRQChip, nil
	}
	return "", fmt.Errorf("irqchip %q: want %q or %q", s, IRQChipSplit, IRQChipKernel)
}

// createIRQChip creates the interrupt controllers of m.cfg.IRQChip; it must
// come before the vCPUs.
func (m *Machine) createIRQChip() error {
	switch m.cfg.IRQChip {
	case IRQChipKernel:
		if err := m.vm.CreateIRQChip(); err != nil {
			return err
		}
		return m.vm.CreatePIT2(kvm.PITConfig{Flags: pitSpeakerDummy})
	case IRQChipSplit:
		if err := m.vm.EnableCap(kvm.CapSplitIRQChip, ioapic.Pins); err != nil {
			return fmt.Errorf("split irqchip (KVM_CAP_SPLIT_IRQCHIP): %w", err)
		}
		m.ioapic = ioapic.New(acpi.IOAPICID, m.routeIOAPIC)
		if err := m.mmio.Register(uint64(acpi.IOAPICAddr), ioapic.WindowSize, m.ioapic); err != nil {
			return err
		}
		// Without KVM's PIT nothing answers port 0x61, which Linux reads
		// for the reason of an NMI; all ones there would read as a parity
		// and an I/O channel error.
		if err := m.pio.Register(portb.Port, 1, portb.New()); err != nil {
			return err
		}
		m.deviceInfo = append(m.deviceInfo,
			DeviceInfo{Kind: "ioapic", Bus: "mmio", Addr: uint64(acpi.IOAPICAddr), Size: ioapic.WindowSize},
			DeviceInfo{Kind: "port-b", Bus: "pio", Addr: portb.Port, Size: 1})
		return nil
	}
	return fmt.Errorf("irqchip %q: want %q or %q", m.cfg.IRQChip, IRQChipSplit, IRQChipKernel)
}

// routeIOAPIC installs the I/O APIC's routes in KVM. Pin n is GSI n: the
// devices' irqfds raise the GSI of their pin. A failure while the guest
// programs its I/O APIC has no caller to return to (the guest's MMIO write
// cannot fail), so it goes to the VMM's log, where a guest that stopped
// getting its interrupts is looked into; the I/O APIC keeps the last table
// KVM took and tries again at the guest's next change.
func (m *Machine) routeIOAPIC(routes []ioapic.Route) error {
	table := make([]kvm.MSIRoute, len(routes))
	for i, r := range routes {
		table[i] = kvm.MSIRoute{GSI: r.Pin, AddressLo: r.AddressLo, Data: r.Data}
	}
	if err := m.vm.SetGSIRouting(table); err != nil {
		slog.Error("irqchip: KVM refused the guest's I/O APIC routes; its device interrupts follow the previous table", "routes", len(table), "err", err)
		return err
	}
	return nil
}

// IRQChipState is the interrupt controllers' part of VMState.
type IRQChipState struct {
	IRQChip IRQChip // which the machine had; a restore builds the same
	// The in-kernel irqchip's controllers and timer (IRQChipKernel).
	PIT       kvm.PITState2
	PICMaster kvm.IRQChip
	PICSlave  kvm.IRQChip
	IOAPIC    kvm.IRQChip
	// The VMM's I/O APIC (IRQChipSplit).
	UserIOAPIC ioapic.State
}

func (m *Machine) captureIRQChip() (s IRQChipState, err error) {
	s.IRQChip = m.cfg.IRQChip
	if m.cfg.IRQChip == IRQChipSplit {
		s.UserIOAPIC = m.ioapic.State()
		return s, nil
	}
	if s.PIT, err = m.vm.GetPIT2(); err != nil {
		return s, err
	}
	if s.PICMaster, err = m.vm.GetIRQChip(kvm.IRQChipPICMaster); err != nil {
		return s, err
	}
	if s.PICSlave, err = m.vm.GetIRQChip(kvm.IRQChipPICSlave); err != nil {
		return s, err
	}
	s.IOAPIC, err = m.vm.GetIRQChip(kvm.IRQChipIOAPIC)
	return s, err
}

func (m *Machine) restoreIRQChip(s IRQChipState) error {
	if s.IRQChip != m.cfg.IRQChip {
		return fmt.Errorf("saved with the %s irqchip, this machine has the %s one", s.IRQChip, m.cfg.IRQChip)
	}
	if m.cfg.IRQChip == IRQChipSplit {
		return m.ioapic.Restore(s.UserIOAPIC)
	}
	if err := m.vm.SetPIT2(s.PIT); err != nil {
		return err
	}
	for _, c := range []kvm.IRQChip{s.PICMaster, s.PICSlave, s.IOAPIC} {
		if err := m.vm.SetIRQChip(c); err != nil {
			return err
		}
	}
	return nil
}
