package vmm

import (
	"strings"
	"testing"
	"time"
)

// programIOAPICCode points I/O APIC pin 4 at vector 0x24 on APIC 1 through
// the MMIO window, the way Linux writes an entry (high half, then low), and
// then spins.
var programIOAPICCode = []byte{
	0xb8, 0x00, 0x00, 0xc0, 0xfe, // mov eax, 0xFEC00000
	0xc7, 0x00, 0x19, 0x00, 0x00, 0x00, // mov dword [rax], 0x19 (entry 4, high)
	0xc7, 0x40, 0x10, 0x00, 0x00, 0x00, 0x01, // mov dword [rax+0x10], 0x01000000
	0xc7, 0x00, 0x18, 0x00, 0x00, 0x00, // mov dword [rax], 0x18 (entry 4, low)
	0xc7, 0x40, 0x10, 0x24, 0x00, 0x00, 0x00, // mov dword [rax+0x10], 0x24
	0xeb, 0xfe, // jmp $
}

const programmedEntry = 0x0100_0000_0000_0024

func irqchipMachine(t *testing.T, chip IRQChip, code []byte) *Machine {
	t.Helper()
	return tinyMachineWith(t, code, Config{CPUs: 1, IRQChip: chip})
}

// TestGuestProgramsTheSplitIRQChipsIOAPIC: the guest's MMIO writes reach
// the VMM's I/O APIC, a paused machine's state carries the entry, and a
// second machine restored from it has the same entry (and so routes).
func TestGuestProgramsTheSplitIRQChipsIOAPIC(t *testing.T) {
	m := irqchipMachine(t, IRQChipSplit, programIOAPICCode)
	if m.ioapic == nil {
		t.Fatal("a split-irqchip machine has no I/O APIC of its own")
	}
	listed := false
	for _, d := range m.DeviceInfo() {
		listed = listed || d.Kind == "ioapic" && d.Addr == 0xFEC0_0000
	}
	if !listed {
		t.Errorf("DeviceInfo does not list the I/O APIC: %+v", m.DeviceInfo())
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.ioapic.State().Redirect[4] != programmedEntry {
		if time.Now().After(deadline) {
			t.Fatalf("entry 4 = %#x after 10 s, want %#x", m.ioapic.State().Redirect[4], uint64(programmedEntry))
		}
		time.Sleep(time.Millisecond)
	}
	if err := m.ioapic.Err(); err != nil {
		t.Fatalf("KVM refused the entry's route: %v", err)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	vcpus, vm, err := m.CPUState()
	if err != nil {
		t.Fatal(err)
	}
	if vm.IRQChip != IRQChipSplit || vm.UserIOAPIC.Redirect[4] != programmedEntry {
		t.Fatalf("saved irqchip %q with entry 4 = %#x", vm.IRQChip, vm.UserIOAPIC.Redirect[4])
	}

	copyOf := irqchipMachine(t, IRQChipSplit, programIOAPICCode)
	if err := copyOf.RestoreCPUState(vcpus, vm); err != nil {
		t.Fatal(err)
	}
	if got := copyOf.ioapic.State(); got != vm.UserIOAPIC {
		t.Errorf("restored I/O APIC %+v, want %+v", got, vm.UserIOAPIC)
	}

	// The in-kernel irqchip cannot take the split one's state.
	other := irqchipMachine(t, IRQChipKernel, programIOAPICCode)
	if err := other.RestoreCPUState(vcpus, vm); err == nil || !strings.Contains(err.Error(), "irqchip") {
		t.Errorf("restoring split-irqchip state on an in-kernel irqchip: %v, want a refusal naming the irqchip", err)
	}
}

// TestKernelIRQChipStillWorks: the in-kernel irqchip stays selectable, has
// no I/O APIC in the VMM, and its state round-trips.
func TestKernelIRQChipStillWorks(t *testing.T) {
	m := irqchipMachine(t, IRQChipKernel, programIOAPICCode)
	if m.ioapic != nil {
		t.Fatal("an in-kernel-irqchip machine has a VMM I/O APIC")
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	// KVM's own I/O APIC takes the guest's writes: wait for entry 4 to
	// show in its saved state.
	var vcpus []VCPUState
	var vm VMState
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
		var err error
		if vcpus, vm, err = m.CPUState(); err != nil {
			t.Fatal(err)
		}
		if vm.IOAPIC.IOAPIC().RedirTbl[4] == programmedEntry {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in-kernel entry 4 = %#x after 10 s, want %#x", vm.IOAPIC.IOAPIC().RedirTbl[4], uint64(programmedEntry))
		}
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if vm.IRQChip != IRQChipKernel {
		t.Fatalf("saved irqchip %q, want %q", vm.IRQChip, IRQChipKernel)
	}
	copyOf := irqchipMachine(t, IRQChipKernel, programIOAPICCode)
	if err := copyOf.RestoreCPUState(vcpus, vm); err != nil {
		t.Fatal(err)
	}
}

func TestParseIRQChip(t *testing.T) {
	for in, want := range map[string]IRQChip{"": DefaultIRQChip, "split": IRQChipSplit, "kernel": IRQChipKernel} {
		if got, err := ParseIRQChip(in); err != nil || got != want {
			t.Errorf("ParseIRQChip(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseIRQChip("userspace"); err == nil {
		t.Error("ParseIRQChip accepted an unknown irqchip")
	}
}
