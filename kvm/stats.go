package kvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// KVM's binary statistics (KVM_GET_STATS_FD, Documentation/virt/kvm/api.rst
// "KVM_GET_STATS_FD") are the kernel's own counters for a VM or a vCPU:
// exits by kind, page faults, remote TLB flushes, halt polling. They show
// what the guest does inside KVM, where the VMM's own exit counts cannot see.

// kvmGetStatsFD is KVM_GET_STATS_FD, valid on VM and vCPU fds.
var kvmGetStatsFD = ioNone(0xce)

// Stat is one counter: its name as the kernel spells it and its value.
type Stat struct {
	Name  string
	Value uint64
}

// statsDescSize is the fixed part of struct kvm_stats_desc, before its name.
const statsDescSize = 16

// maxStatsDescs bounds how many descriptors are read: the kernel has a few
// dozen; a larger number means a header this code does not understand.
const maxStatsDescs = 4096

// Stats reads the VM's statistics.
func (vm *VM) Stats() ([]Stat, error) { return readStats(vm.fd) }

// Stats reads the vCPU's statistics.
func (v *VCPU) Stats() ([]Stat, error) { return readStats(v.fd) }

// readStats reads every single-valued statistic of the object behind fd
// (histograms are skipped), in the kernel's order.
func readStats(fd int) ([]Stat, error) {
	statsFD, err := ioctl(fd, "KVM_GET_STATS_FD", kvmGetStatsFD, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(int(statsFD))
	f := int(statsFD)

	// struct kvm_stats_header: flags, name_size, num_desc, id_offset,
	// desc_offset, data_offset, all u32.
	header := make([]byte, 24)
	if _, err := unix.Pread(f, header, 0); err != nil {
		return nil, fmt.Errorf("KVM stats header: %w", err)
	}
	nameSize, numDesc := u32le(header[4:]), u32le(header[8:])
	descOffset, dataOffset := u32le(header[16:]), u32le(header[20:])
	if numDesc > maxStatsDescs || nameSize == 0 || nameSize > 4096 {
		return nil, errors.New("KVM stats header has implausible sizes")
	}
	descSize := statsDescSize + int(nameSize)
	descs := make([]byte, int(numDesc)*descSize)
	if _, err := unix.Pread(f, descs, int64(descOffset)); err != nil {
		return nil, fmt.Errorf("KVM stats descriptors: %w", err)
	}
	stats := make([]Stat, 0, numDesc)
	value := make([]byte, 8)
	for i := 0; i < int(numDesc); i++ {
		// struct kvm_stats_desc: flags u32, exponent s16, size u16 (in
		// u64s), offset u32 (into the data block), bucket_size u32, name.
		d := descs[i*descSize : (i+1)*descSize]
		size, offset := binary.LittleEndian.Uint16(d[6:]), u32le(d[8:])
		if size != 1 {
			continue // a histogram
		}
		if _, err := unix.Pread(f, value, int64(dataOffset)+int64(offset)); err != nil {
			return nil, fmt.Errorf("KVM stats data: %w", err)
		}
		name := d[statsDescSize:]
		if n := bytes.IndexByte(name, 0); n >= 0 {
			name = name[:n]
		}
		stats = append(stats, Stat{Name: string(name), Value: binary.LittleEndian.Uint64(value)})
	}
	return stats, nil
}

func u32le(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
