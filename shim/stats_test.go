package shim

import (
	"testing"

	v2stats "github.com/containerd/cgroups/v2/stats"
	"github.com/containerd/typeurl"
	"github.com/smolvm/smol"
)

// TestStatsReachContainerdAsCgroupV2Metrics: the guest's counters travel
// as the cgroup v2 metrics type containerd's CRI decodes (its type URL
// resolves back to *v2stats.Metrics), each in the field CRI reads.
func TestStatsReachContainerdAsCgroupV2Metrics(t *testing.T) {
	st := smol.CgroupStats{CPUUsageUsec: 1500, CPUUserUsec: 1000, CPUSystemUsec: 500, MemoryUsage: 8 << 20,
		MemoryLimit: 64 << 20, Anon: 5 << 20, File: 3 << 20, ActiveFile: 1 << 20, InactiveFile: 2 << 20,
		PageFaults: 77, MajorFaults: 3, Pids: 4}
	data, err := typeurl.MarshalAny(cgroupMetrics(st))
	if err != nil {
		t.Fatal(err)
	}
	if data.TypeUrl != "io.containerd.cgroups.v2.Metrics" {
		t.Errorf("type URL %q", data.TypeUrl)
	}
	v, err := typeurl.UnmarshalAny(data)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(*v2stats.Metrics)
	if !ok {
		t.Fatalf("decoded as %T", v)
	}
	if m.CPU.UsageUsec != 1500 || m.CPU.UserUsec != 1000 || m.CPU.SystemUsec != 500 || m.Pids.Current != 4 ||
		m.Memory.Usage != 8<<20 || m.Memory.UsageLimit != 64<<20 || m.Memory.Anon != 5<<20 || m.Memory.File != 3<<20 ||
		m.Memory.ActiveFile != 1<<20 || m.Memory.InactiveFile != 2<<20 || m.Memory.Pgfault != 77 || m.Memory.Pgmajfault != 3 {
		t.Errorf("metrics %+v, cpu %+v, memory %+v", m, m.CPU, m.Memory)
	}
}
