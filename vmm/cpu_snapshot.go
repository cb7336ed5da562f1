package vmm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/smolvm/smol/kvm"
)

// VCPUState is one vCPU's whole KVM state as a snapshot keeps it. It is
// read from a parked vCPU, whose last port or MMIO exit has completed
// (see pause.go): a state read at an exit that has not would, restored,
// run the IN or OUT again.
type VCPUState struct {
	CPUID     []kvm.CPUIDEntry
	MPState   kvm.MPState
	Regs      kvm.Regs
	Sregs     kvm.Sregs
	XSave     kvm.XSave
	XCRs      kvm.XCRs
	DebugRegs kvm.DebugRegs
	LAPIC     kvm.LAPICState
	TSCKHz    uint32
	MSRs      []kvm.MSREntry
	Events    kvm.VCPUEvents
}

// VMState is the VM-wide state: the clock and the interrupt controllers
// (KVM's PIT, PICs and I/O APIC, or the VMM's I/O APIC).
type VMState struct {
	Clock kvm.ClockData
	IRQChipState
}

// ErrNotPaused says a state operation needs a paused machine.
var ErrNotPaused = errors.New("the machine is not paused")

// CPUState reads every vCPU's state and the VM's from a paused machine.
// The MSRs are those KVM lists (KVM_GET_MSR_INDEX_LIST), not a list of
// our own, less any this vCPU refuses to read.
func (m *Machine) CPUState() ([]VCPUState, VMState, error) {
	if !m.Paused() {
		return nil, VMState{}, ErrNotPaused
	}
	indices, err := m.sys.MSRIndexList()
	if err != nil {
		return nil, VMState{}, err
	}
	slices.Sort(indices)
	var out []VCPUState
	for _, v := range m.vcpus {
		s, err := captureVCPU(v.fd, indices)
		if err != nil {
			return nil, VMState{}, fmt.Errorf("vCPU %d: %w", v.index, err)
		}
		out = append(out, s)
	}
	vm, err := m.captureVM()
	return out, vm, err
}

// RestoreCPUState sets every vCPU's state and the VM's, in the order KVM
// needs, on a machine that has not started (or is paused).
func (m *Machine) RestoreCPUState(vcpus []VCPUState, vm VMState) error {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if started && !m.Paused() {
		return ErrNotPaused
	}
	if len(vcpus) != len(m.vcpus) {
		return fmt.Errorf("state for %d vCPUs, the machine has %d", len(vcpus), len(m.vcpus))
	}
	for i, v := range m.vcpus {
		if err := restoreVCPU(v.fd, vcpus[i]); err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
	}
	return m.restoreVM(vm)
}

func captureVCPU(fd *kvm.VCPU, msrIndices []uint32) (s VCPUState, err error) {
	// MP_STATE first: reading it makes KVM take pending APIC events.
	if s.MPState, err = fd.MPState(); err != nil {
		return s, err
	}
	if s.Regs, err = fd.Regs(); err != nil {
		return s, err
	}
	if s.Sregs, err = fd.Sregs(); err != nil {
		return s, err
	}
	xs, err := fd.XSave()
	if err != nil {
		return s, err
	}
	s.XSave = *xs
	if s.XCRs, err = fd.XCRs(); err != nil {
		return s, err
	}
	if s.DebugRegs, err = fd.DebugRegs(); err != nil {
		return s, err
	}
	if s.LAPIC, err = fd.LAPIC(); err != nil {
		return s, err
	}
	if s.TSCKHz, err = fd.TSCKHz(); err != nil {
		return s, err
	}
	c, err := fd.CPUID()
	if err != nil {
		return s, err
	}
	s.CPUID = c.Entries
	if s.MSRs, err = readMSRs(fd, msrIndices); err != nil {
		return s, err
	}
	// Events last: nothing after it may change what is pending.
	s.Events, err = fd.VCPUEvents()
	return s, err
}

// readMSRs reads every MSR of indices that the vCPU will give: all at
// once, and one by one when some MSR is refused, leaving that one out.
func readMSRs(fd *kvm.VCPU, indices []uint32) ([]kvm.MSREntry, error) {
	if all, err := fd.GetMSRs(indices); err == nil {
		return all, nil
	}
	var out []kvm.MSREntry
	for _, idx := range indices {
		e, err := fd.GetMSRs([]uint32{idx})
		if err == nil {
			out = append(out, e...)
		}
	}
	if len(out) == 0 && len(indices) > 0 {
		return nil, errors.New("KVM_GET_MSRS: no MSR could be read")
	}
	return out, nil
}

// restoreVCPU sets s in the order KVM needs: CPUID before anything that
// depends on it, REGS before EVENTS (setting registers clears a pending
// exception), LAPIC after SREGS (the APIC base) and before the MSRs (the
// TSC deadline needs the LAPIC; the MSR list is in index order, so the TSC
// comes before its deadline).
func restoreVCPU(fd *kvm.VCPU, s VCPUState) error {
	if err := fd.SetCPUID(&kvm.CPUID{Entries: s.CPUID}); err != nil {
		return err
	}
	if err := fd.SetMPState(s.MPState); err != nil {
		return err
	}
	if err := fd.SetRegs(s.Regs); err != nil {
		return err
	}
	if err := fd.SetSregs(s.Sregs); err != nil {
		return err
	}
	xs := s.XSave
	if err := fd.SetXSave(&xs); err != nil {
		return err
	}
	if err := fd.SetXCRs(s.XCRs); err != nil {
		return err
	}
	if err := fd.SetDebugRegs(s.DebugRegs); err != nil {
		return err
	}
	if err := fd.SetLAPIC(s.LAPIC); err != nil {
		return err
	}
	if err := fd.SetMSRs(s.MSRs); err != nil {
		return err
	}
	return fd.SetVCPUEvents(s.Events)
}

func (m *Machine) captureVM() (s VMState, err error) {
	if s.Clock, err = m.vm.GetClock(); err != nil {
		return s, err
	}
	s.IRQChipState, err = m.captureIRQChip()
	return s, err
}

func (m *Machine) restoreVM(s VMState) error {
	if err := m.restoreIRQChip(s.IRQChipState); err != nil {
		return err
	}
	// The clock's realtime and host TSC fields are what the kernel
	// reported; SetClock takes only the clock value and flags it honours.
	return m.vm.SetClock(kvm.ClockData{Clock: s.Clock.Clock})
}

func sortedCopy(xs []uint32) []uint32 {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
