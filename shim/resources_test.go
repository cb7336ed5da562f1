package shim

import (
	"testing"

	"github.com/containerd/typeurl"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol"
)

// TestCgroupLimitsFromSpec: kubelet's resources (through CRI's spec) as
// the guest cgroup's limits, and the shares-to-weight ends.
func TestCgroupLimitsFromSpec(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	for _, c := range []struct {
		name string
		res  *specs.LinuxResources
		want *smol.CgroupLimits
	}{
		{"none", nil, nil},
		{"empty", &specs.LinuxResources{}, &smol.CgroupLimits{}},
		{"a pod's container", &specs.LinuxResources{
			Memory: &specs.LinuxMemory{Limit: i64(64 << 20)},
			CPU:    &specs.LinuxCPU{Shares: u64(512), Quota: i64(50000), Period: u64(100000)},
			Pids:   &specs.LinuxPids{Limit: i64(100)},
		}, &smol.CgroupLimits{MemoryMax: 64 << 20, CPUWeight: 20, CPUQuotaUsec: 50000, CPUPeriodUsec: 100000, PidsMax: 100}},
		{"unlimited", &specs.LinuxResources{
			Memory: &specs.LinuxMemory{Limit: i64(-1)},
			CPU:    &specs.LinuxCPU{Quota: i64(-1), Period: u64(100000)},
			Pids:   &specs.LinuxPids{Limit: i64(-1)},
		}, &smol.CgroupLimits{}},
		{"the fewest shares", &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: u64(2)}}, &smol.CgroupLimits{CPUWeight: 1}},
		{"under the fewest shares", &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: u64(1)}}, &smol.CgroupLimits{CPUWeight: 1}},
		{"the default shares", &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: u64(1024)}}, &smol.CgroupLimits{CPUWeight: 39}},
		{"the most shares", &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: u64(1 << 20)}}, &smol.CgroupLimits{CPUWeight: 10000}},
	} {
		got := cgroupLimits(c.res)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: limits %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestUpdateResourcesType: what containerd sends in an UpdateTaskRequest
// (the spec's resources as an Any) decodes to the type Update takes.
func TestUpdateResourcesType(t *testing.T) {
	limit := int64(32 << 20)
	any, err := typeurl.MarshalAny(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := typeurl.UnmarshalAny(any)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := v.(*specs.LinuxResources)
	if !ok || cgroupLimits(res).MemoryMax != 32<<20 {
		t.Fatalf("decoded %T %+v", v, v)
	}
}
