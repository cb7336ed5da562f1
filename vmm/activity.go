package vmm

import (
	"fmt"
	"strings"
	"time"

	"github.com/smolvm/smol/kvm"
)

// activityStats are the KVM vCPU counters that tell a live guest from a
// stuck one: a guest that runs its timer exits and takes interrupts; one
// that idles in HLT is woken; one that stopped does neither.
var activityStats = []string{"exits", "halt_exits", "halt_wakeup", "irq_injections", "irq_window_exits"}

// GuestActivity watches the guest for window and describes, in one line,
// what it did and where each virtio device's interrupt stands: per vCPU,
// whether its thread is in KVM_RUN or held in the VMM and how often it
// entered, and KVM's counters of exits and interrupts. It is the
// VMM's side of a diagnosis when the guest stopped answering the host: a
// guest whose vCPUs still exit and take interrupts is alive, and then a
// device interrupt raised and never acknowledged (InterruptStatus still
// set) points at a lost interrupt rather than a dead guest, while a device
// with nothing raised and work the guest never saw (the queues' own
// description, vsock logs it) points at a notification the device missed.
// It reads KVM's counters and the in-kernel irqchip, so it disturbs neither
// the vCPUs nor the devices. It takes window to answer, and like KVMStats
// it is valid until Close ("" once Close began).
func (m *Machine) GuestActivity(window time.Duration) string {
	m.mu.Lock()
	closed := m.closed || m.vm == nil
	m.mu.Unlock()
	if closed {
		return ""
	}
	before := m.vcpuCounters()
	entries := make([]uint64, len(m.vcpus))
	for i, v := range m.vcpus {
		entries[i] = v.entries.Load()
	}
	time.Sleep(window)
	after := m.vcpuCounters()
	var b strings.Builder
	fmt.Fprintf(&b, "over %v:", window)
	for i, v := range m.vcpus {
		where := "in the VMM"
		if v.inGuest.Load() {
			where = "in KVM_RUN"
		}
		fmt.Fprintf(&b, " vcpu%d (%s, entries +%d)", i, where, v.entries.Load()-entries[i])
		if after[i] == nil || before[i] == nil {
			b.WriteString(" (no KVM statistics)")
			continue
		}
		for _, name := range activityStats {
			if value, ok := after[i][name]; ok {
				fmt.Fprintf(&b, " %s +%d", name, value-before[i][name])
			}
		}
	}
	var ioapic *kvm.IOAPICState
	if m.ioapic == nil {
		if chip, err := m.vm.GetIRQChip(kvm.IRQChipIOAPIC); err == nil {
			st := chip.IOAPIC()
			ioapic = &st
		}
	}
	for _, vd := range m.virtio {
		fmt.Fprintf(&b, "; %s isr %#x", kindOf(vd.transport.Device()), vd.transport.InterruptStatus())
		if gsi := vd.irq.gsi; ioapic != nil && gsi < kvm.IOAPICNumPins {
			fmt.Fprintf(&b, " pin %d %s", gsi, describePin(ioapic.RedirTbl[gsi], ioapic.IRR&(1<<gsi) != 0))
		}
	}
	return b.String()
}

// vcpuCounters reads activityStats of every vCPU; a vCPU whose counters
// cannot be read (a kernel without KVM_GET_STATS_FD) gets nil.
func (m *Machine) vcpuCounters() []map[string]uint64 {
	out := make([]map[string]uint64, len(m.vcpus))
	for i, v := range m.vcpus {
		stats, err := v.fd.Stats()
		if err != nil {
			continue
		}
		out[i] = map[string]uint64{}
		for _, s := range stats {
			out[i][s.Name] = s.Value
		}
	}
	return out
}

// describePin decodes an I/O APIC redirection entry (82093AA datasheet,
// 3.2.4): its vector, whether the guest masked it, and for a
// level-triggered pin whether an interrupt awaits the guest's EOI (remote
// IRR); irr is the pin's bit of the chip's interrupt request register.
func describePin(entry uint64, irr bool) string {
	s := fmt.Sprintf("vector %#x", entry&0xff)
	if entry&(1<<15) != 0 {
		s += " level"
		if entry&(1<<14) != 0 {
			s += " remote-irr"
		}
	} else {
		s += " edge"
	}
	if entry&(1<<16) != 0 {
		s += " masked"
	}
	if irr {
		s += " irr"
	}
	return s
}
