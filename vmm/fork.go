package vmm

import "fmt"

// Fork makes a child of the paused machine: a new machine (not started)
// whose vCPUs, VM and devices continue from the parent's state and whose
// RAM is a copy-on-write view of the parent's at this instant, with no
// memory copied. The parent's RAM is frozen first (memory.Guest.Freeze:
// it becomes private itself and its memfd sealed), so that neither sees
// the other's later writes; the parent may resume and run on as a sibling.
//
// cfg gives the child its console and its devices, which must match the
// parent's in kind and order (disks are the caller's to copy or
// overlay, since two machines must never write one image); its CPUs and
// memory size are the parent's.
func (m *Machine) Fork(cfg Config) (*Machine, error) {
	if !m.Paused() {
		return nil, ErrNotPaused
	}
	if err := m.savable(); err != nil {
		return nil, err
	}
	vcpus, vm, err := m.CPUState()
	if err != nil {
		return nil, err
	}
	devices := make([]DeviceState, len(m.virtio))
	for i, vd := range m.virtio {
		devices[i] = deviceState(vd)
	}
	if err := m.mem.Freeze(); err != nil {
		return nil, err
	}
	mem, err := m.mem.Fork()
	if err != nil {
		return nil, err
	}
	legacy := m.legacy.state()
	cfg.CPUs, cfg.Memory = m.cfg.CPUs, m.cfg.Memory
	cfg.restore = &restoreSource{memory: mem, vcpus: vcpus, vm: vm, legacy: &legacy, devices: devices}
	child, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	return child, nil
}
