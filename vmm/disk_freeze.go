package vmm

import (
	"fmt"

	"github.com/smolvm/smol/virtio/blk"
)

// blkDisk is the open disk behind the machine's disk i (Devices.Disks),
// or nil.
func (m *Machine) blkDisk(i int) *blk.Disk {
	n := 0
	for _, vd := range m.virtio {
		if dev, ok := vd.transport.Device().(*blk.Device); ok {
			if n == i {
				return dev.Disk()
			}
			n++
		}
	}
	return nil
}

// FreezeDisk makes disk i's contents as they are now a read-only base
// beside it (named from stem, blk.Disk.Freeze) and the disk, from now on,
// an empty copy-on-write layer over it: the frozen base is what a fork's
// children build their own layers on. The machine must be paused (its
// disk's requests drained). It returns the disk's new path and the base's
// file name.
func (m *Machine) FreezeDisk(i int, stem string) (path, base string, err error) {
	if !m.Paused() {
		return "", "", ErrNotPaused
	}
	d := m.blkDisk(i)
	if d == nil {
		return "", "", fmt.Errorf("the machine has no disk %d", i)
	}
	path, base, err = d.Freeze(stem)
	if err != nil {
		return "", "", err
	}
	m.spec.Disks[i].Path = path
	return path, base, nil
}

// DiskDepth is how many copy-on-write layers disk i stacks.
func (m *Machine) DiskDepth(i int) int {
	if d := m.blkDisk(i); d != nil {
		return d.Depth()
	}
	return 0
}

// FlushDisks makes every disk durable, layers' bitmaps included: a paused
// machine's disk files then hold what the guest wrote, for a snapshot or
// for a copy taken beside the VMM.
func (m *Machine) FlushDisks() error {
	for i := range m.spec.Disks {
		if d := m.blkDisk(i); d != nil && !d.ReadOnly() {
			if err := d.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// DiskSectors is disk i's size in 512-byte sectors.
func (m *Machine) DiskSectors(i int) uint64 {
	if d := m.blkDisk(i); d != nil {
		return d.Sectors()
	}
	return 0
}
