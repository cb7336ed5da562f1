package vmm

import (
	"testing"

	"github.com/smolvm/smol/kvm"
)

func TestGuestCPUIDDescribesTopology(t *testing.T) {
	supported := &kvm.CPUID{Entries: []kvm.CPUIDEntry{
		{Function: 0x1, EBX: 0xff00_0800, EDX: 0},
		{Function: 0xb, Index: 0, Flags: kvm.CPUIDFlagSignificantIndex},
		{Function: 0xb, Index: 1, Flags: kvm.CPUIDFlagSignificantIndex},
		{Function: 0x6, EAX: 0x77},
		{Function: 0x8000_0008, ECX: 0x7007},
	}}
	c := guestCPUID(supported, 3, 4)
	leaf1 := c.Find(0x1, 0)
	if leaf1 == nil || leaf1.EBX>>24 != 3 || (leaf1.EBX>>16)&0xff != 4 || leaf1.EBX&0xffff != 0x0800 {
		t.Fatalf("leaf 1 EBX = %#x", leaf1.EBX)
	}
	if leaf1.ECX&cpuid1ECXHypervisor == 0 || leaf1.EDX&cpuid1EDXHTT == 0 {
		t.Fatalf("leaf 1 ECX=%#x EDX=%#x: hypervisor and HTT bits must be set", leaf1.ECX, leaf1.EDX)
	}
	if l := c.Find(0xb, 1); l.EBX != 4 || l.EDX != 3 || l.EAX != 2 {
		t.Fatalf("leaf 0xb.1 = %+v", l)
	}
	if l := c.Find(0x6, 0); l.EAX != 0 {
		t.Fatalf("leaf 6 not hidden: %+v", l)
	}
	if l := c.Find(0x8000_0008, 0); l.ECX&0xff != 3 || (l.ECX>>12)&0xf != 2 {
		t.Fatalf("leaf 0x80000008 ECX = %#x", l.ECX)
	}
	if supported.Entries[0].EBX != 0xff00_0800 {
		t.Fatal("guestCPUID modified the supported set")
	}
	one := guestCPUID(supported, 0, 1).Find(0x1, 0)
	if one.EDX&cpuid1EDXHTT != 0 || (one.EBX>>16)&0xff != 1 {
		t.Fatalf("1 vCPU leaf 1 = %+v", one)
	}
}
