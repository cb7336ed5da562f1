package kvm

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSystemQueries(t *testing.T) {
	sys := openSystem(t)
	v, err := sys.APIVersion()
	if err != nil || v != APIVersion {
		t.Fatalf("APIVersion() = %d, %v; want %d", v, err, APIVersion)
	}
	for _, c := range []Cap{CapUserMemory, CapIRQChip, CapImmediateExit, CapNrVCPUs, CapMaxVCPUs} {
		n, err := sys.CheckExtension(c)
		if err != nil {
			t.Fatal(err)
		}
		if n <= 0 {
			t.Errorf("CheckExtension(%d) = %d, want > 0 (every KVM since 2.6.x has it)", c, n)
		}
	}
	if n, err := sys.CheckExtension(Cap(0xfffff)); err != nil || n != 0 {
		t.Errorf("CheckExtension(unknown) = %d, %v; want 0, nil", n, err)
	}
	size, err := sys.VCPUMmapSize()
	if err != nil || size < int(runStructSize) || size%unix.Getpagesize() != 0 {
		t.Fatalf("VCPUMmapSize() = %d, %v", size, err)
	}

	cpuid, err := sys.SupportedCPUID()
	if err != nil {
		t.Fatal(err)
	}
	leaf0 := cpuid.Find(0, 0)
	if leaf0 == nil || leaf0.EAX == 0 {
		t.Fatalf("supported CPUID has no usable leaf 0: %+v", leaf0)
	}
	// Leaf 0 spells the vendor in EBX, EDX, ECX.
	vendor := string(le32(leaf0.EBX)) + string(le32(leaf0.EDX)) + string(le32(leaf0.ECX))
	if vendor != "GenuineIntel" && vendor != "AuthenticAMD" && vendor != "HygonGenuine" {
		t.Logf("CPUID vendor %q", vendor)
	}
	if cpuid.Find(1, 0) == nil {
		t.Error("supported CPUID has no leaf 1")
	}

	msrs, err := sys.MSRIndexList()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(msrs, msrSysenterCS) {
		t.Errorf("MSRIndexList (%d entries) lacks IA32_SYSENTER_CS", len(msrs))
	}
	if _, err := sys.FeatureMSRIndexList(); err != nil {
		t.Logf("FeatureMSRIndexList: %v", err)
	}
}

func TestErrorsNameTheIoctl(t *testing.T) {
	_, vm, _ := newVM(t, 0)
	// No irqchip was created, so KVM_GET_IRQCHIP has nothing to return.
	_, err := vm.GetIRQChip(IRQChipPICMaster)
	if err == nil {
		t.Fatal("GetIRQChip without an irqchip succeeded")
	}
	if !strings.HasPrefix(err.Error(), "KVM_GET_IRQCHIP: ") {
		t.Errorf("error %q does not name the ioctl", err)
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		t.Errorf("error %q does not wrap the errno", err)
	}
}

func TestOpenPathMissing(t *testing.T) {
	_, err := OpenPath("/nonexistent/kvm")
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("OpenPath(missing) = %v, want ENOENT", err)
	}
}

func TestSystemClosedBeforeVM(t *testing.T) {
	sys := openSystem(t)
	vm, err := sys.CreateVM()
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := sys.Close(); err != nil {
		t.Fatal(err)
	}
	// The VM kept the mmap size it needs, so vCPUs still work.
	vcpu, err := vm.CreateVCPU(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := vcpu.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vcpu.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

func TestVMSetupAddresses(t *testing.T) {
	sys := openSystem(t)
	requireCap(t, sys, CapSetTSSAddr)
	requireCap(t, sys, CapSetIdentityMapAddr)
	_, vm, _ := newVM(t, 0)
	// The addresses QEMU and Firecracker use, just below the BIOS area.
	must(t, vm.SetIdentityMapAddr(0xfffbc000))
	must(t, vm.SetTSSAddr(0xfffbd000))
	vcpu, err := vm.CreateVCPU(0)
	must(t, err)
	defer vcpu.Close()
	// Once a vCPU exists the identity map can no longer move.
	if err := vm.SetIdentityMapAddr(0xfffbc000); !errors.Is(err, unix.EINVAL) {
		t.Errorf("SetIdentityMapAddr after CreateVCPU = %v, want EINVAL", err)
	}
	if _, err := vm.CreateVCPU(0); !errors.Is(err, unix.EEXIST) {
		t.Errorf("second CreateVCPU(0) = %v, want EEXIST", err)
	}
	if _, err := vm.CreateVCPU(-1); err == nil {
		t.Error("CreateVCPU(-1) succeeded")
	}
}

func TestEmulatedCPUID(t *testing.T) {
	sys := openSystem(t)
	c, err := sys.EmulatedCPUID()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KVM emulates %d CPUID leaves", len(c.Entries))
}
