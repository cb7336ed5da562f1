package kvm

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DevicePath is where the KVM device node normally lives.
const DevicePath = "/dev/kvm"

// APIVersion is the only KVM API version there has ever been; KVM_GET_API_VERSION
// returning anything else means the ioctls below do not apply.
const APIVersion = 12

// System is an open /dev/kvm: it answers questions about the host's KVM and
// creates VMs. It may be closed once the VMs are created; they hold their own
// file descriptors.
type System struct {
	fd int
}

// Open opens /dev/kvm.
func Open() (*System, error) {
	return OpenPath(DevicePath)
}

// OpenPath opens the KVM device at path, for hosts or tests that put it
// somewhere else.
func OpenPath(path string) (*System, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &System{fd: fd}, nil
}

// Fd returns the /dev/kvm file descriptor.
func (s *System) Fd() int { return s.fd }

// Close closes /dev/kvm. VMs created from it stay usable.
func (s *System) Close() error {
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	if err != nil {
		return fmt.Errorf("close /dev/kvm: %w", err)
	}
	return nil
}

// APIVersion returns KVM_GET_API_VERSION, which must equal the APIVersion
// constant for anything else here to be meaningful.
func (s *System) APIVersion() (int, error) {
	return ioctl(s.fd, "KVM_GET_API_VERSION", kvmGetAPIVersion, 0)
}

// CheckExtension returns KVM's answer for cap: 0 when unsupported, otherwise
// 1 or a capability-specific number (a count, a size, a bitmask).
func (s *System) CheckExtension(c Cap) (int, error) {
	return ioctl(s.fd, "KVM_CHECK_EXTENSION", kvmCheckExtension, uintptr(c))
}

// VCPUMmapSize returns the size of the region each vCPU fd must be mmapped
// with: the kvm_run page plus whatever follows it (the PIO data page, the
// coalesced-MMIO ring).
func (s *System) VCPUMmapSize() (int, error) {
	return ioctl(s.fd, "KVM_GET_VCPU_MMAP_SIZE", kvmGetVCPUMmapSize, 0)
}

// CreateVM creates a VM of the default type. The returned VM keeps what it
// needs from s (the vCPU mapping size), so s may be closed afterwards.
func (s *System) CreateVM() (*VM, error) {
	mmapSize, err := s.VCPUMmapSize()
	if err != nil {
		return nil, err
	}
	if mmapSize < int(runStructSize) {
		return nil, fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %d is smaller than struct kvm_run (%d)", mmapSize, runStructSize)
	}
	fd, err := ioctl(s.fd, "KVM_CREATE_VM", kvmCreateVM, 0)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	return &VM{fd: fd, vcpuMmapSize: mmapSize}, nil
}

// SupportedCPUID returns KVM_GET_SUPPORTED_CPUID: every CPUID leaf KVM can
// present to a guest, with the bits it can support set. The VMM trims it and
// hands it to VCPU.SetCPUID.
func (s *System) SupportedCPUID() (*CPUID, error) {
	return s.getCPUID("KVM_GET_SUPPORTED_CPUID", kvmGetSupportedCPUID)
}

// EmulatedCPUID returns KVM_GET_EMULATED_CPUID: features KVM emulates in
// software (slowly) even where the host CPU lacks them.
func (s *System) EmulatedCPUID() (*CPUID, error) {
	return s.getCPUID("KVM_GET_EMULATED_CPUID", kvmGetEmulatedCPUID)
}

// maxCPUIDEntries bounds how far getCPUID grows its buffer; KVM's own limit
// (KVM_MAX_CPUID_ENTRIES) is 256.
const maxCPUIDEntries = 4096

func (s *System) getCPUID(name string, req uintptr) (*CPUID, error) {
	// KVM answers E2BIG until the buffer holds every entry; it does not say
	// how many it needs, so double until it fits.
	for n := 64; n <= maxCPUIDEntries; n *= 2 {
		c, err := cpuidIoctl(s.fd, name, req, make([]CPUIDEntry, n))
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		return c, err
	}
	return nil, fmt.Errorf("%s: more than %d entries: %w", name, maxCPUIDEntries, unix.E2BIG)
}

// cpuidIoctl passes entries as a struct kvm_cpuid2 and returns what KVM
// left in it. It is shared by the system and vCPU CPUID requests.
func cpuidIoctl(fd int, name string, req uintptr, entries []CPUIDEntry) (*CPUID, error) {
	buf := make([]byte, unsafe.Sizeof(cpuidHeader{})+uintptr(len(entries))*unsafe.Sizeof(CPUIDEntry{}))
	hdr := (*cpuidHeader)(unsafe.Pointer(&buf[0]))
	hdr.Nent = uint32(len(entries))
	wire := unsafe.Slice((*CPUIDEntry)(unsafe.Pointer(&buf[unsafe.Sizeof(cpuidHeader{})])), len(entries))
	copy(wire, entries)
	if _, err := ioctlPtr(fd, name, req, unsafe.Pointer(&buf[0])); err != nil {
		return nil, err
	}
	n := int(hdr.Nent)
	if n > len(entries) {
		return nil, fmt.Errorf("%s: kernel reported %d entries in a buffer of %d", name, n, len(entries))
	}
	out := make([]CPUIDEntry, n)
	copy(out, wire[:n])
	return &CPUID{Entries: out}, nil
}

// MSRIndexList returns KVM_GET_MSR_INDEX_LIST: the MSRs a VMM must save
// and restore to capture a vCPU completely.
func (s *System) MSRIndexList() ([]uint32, error) {
	return msrList(s.fd, "KVM_GET_MSR_INDEX_LIST", kvmGetMSRIndexList)
}

// FeatureMSRIndexList returns KVM_GET_MSR_FEATURE_INDEX_LIST: the
// read-only feature MSRs (ARCH_CAPABILITIES and the like) whose values the
// VMM may choose for the guest.
func (s *System) FeatureMSRIndexList() ([]uint32, error) {
	return msrList(s.fd, "KVM_GET_MSR_FEATURE_INDEX_LIST", kvmGetMSRFeatureIndexList)
}

// maxMSRIndices bounds the MSR list buffer against a kernel answer that
// keeps growing.
const maxMSRIndices = 1 << 16

func msrList(fd int, name string, req uintptr) ([]uint32, error) {
	// Unlike CPUID, KVM writes the needed count back on E2BIG.
	n := 256
	for attempt := 0; attempt < 4; attempt++ {
		buf := make([]uint32, 1+n) // header (nmsrs) then indices
		buf[0] = uint32(n)
		_, err := ioctlPtr(fd, name, req, unsafe.Pointer(&buf[0]))
		if errors.Is(err, unix.E2BIG) {
			need := int(buf[0])
			if need <= n || need > maxMSRIndices {
				return nil, fmt.Errorf("%s: kernel asked for %d entries (had %d): %w", name, need, n, err)
			}
			n = need
			continue
		}
		if err != nil {
			return nil, err
		}
		got := int(buf[0])
		if got > n {
			return nil, fmt.Errorf("%s: kernel reported %d entries in a buffer of %d", name, got, n)
		}
		return append([]uint32(nil), buf[1:1+got]...), nil
	}
	return nil, fmt.Errorf("%s: list kept growing", name)
}
