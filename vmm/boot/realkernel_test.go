package boot

import (
	"os"
	"path/filepath"
	"testing"
)

// The project's kernel build (make kernel) leaves its output in build/ at
// the repository root; these tests load the real thing when it is there.
func realKernel(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "build", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no %s (build the guest kernel first): %v", p, err)
	}
	return p
}

func TestLoadRealVmlinuxUsesPVH(t *testing.T) {
	kernel := realKernel(t, "vmlinux")
	m := newMem(t, 256<<20)
	initrd := payload(1 << 20)
	e, err := Load(m, Config{Kernel: kernel, Initrd: writeFile(t, "initrd", initrd), Cmdline: "console=ttyS0", ACPI: testACPI()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Protocol != ProtocolPVH {
		t.Fatalf("protocol %q: the guest kernel is built with CONFIG_PVH", e.Protocol)
	}
	if e.KernelStart < HighMemStart || e.Regs.RIP < e.KernelStart || e.Regs.RIP >= e.KernelEnd || e.Regs.RIP >= 1<<32 {
		t.Errorf("PVH entry %#x outside the kernel [%#x, %#x)", e.Regs.RIP, e.KernelStart, e.KernelEnd)
	}
	checkInitrd(t, m, e, initrd, m.LowEnd())
	t.Logf("vmlinux: PVH entry %#x, kernel [%#x, %#x)", e.Regs.RIP, e.KernelStart, e.KernelEnd)
}

func TestLoadRealBzImage(t *testing.T) {
	for _, name := range []string{"bzImage", "stock-vmlinuz"} {
		t.Run(name, func(t *testing.T) {
			kernel := realKernel(t, name)
			m := newMem(t, 512<<20)
			e, err := Load(m, Config{Kernel: kernel, Cmdline: "console=ttyS0", ACPI: testACPI()})
			if err != nil {
				t.Fatal(err)
			}
			zp := read(t, m, ZeroPageAddr, zeroPageSize)
			version := u16(zp, hdrVersion)
			if e.Protocol != ProtocolLinux64 || version < minProtocol || e.Regs.RIP != e.KernelStart+0x200 && e.Regs.RIP != HighMemStart+0x200 {
				t.Errorf("protocol %q version %#x RIP %#x kernel [%#x, %#x)", e.Protocol, version, e.Regs.RIP, e.KernelStart, e.KernelEnd)
			}
			if version >= rsdpProtocol && u64(zp, bpACPIRSDPAddr) != ACPIAddr {
				t.Errorf("acpi_rsdp_addr %#x", u64(zp, bpACPIRSDPAddr))
			}
			checkLongMode(t, m, e)
			t.Logf("%s: protocol %d.%02d, entry %#x, kernel [%#x, %#x)", name, version>>8, version&0xff, e.Regs.RIP, e.KernelStart, e.KernelEnd)
		})
	}
}
