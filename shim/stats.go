package shim

import (
	"context"
	"fmt"

	v2stats "github.com/containerd/cgroups/v2/stats"
	"github.com/containerd/containerd/errdefs"
	taskapi "github.com/containerd/containerd/runtime/v2/task"
	"github.com/containerd/typeurl"
	"github.com/smolvm/smol"
)

// Stats reports a container's use as cgroup v2 metrics, which is what
// containerd's CRI turns into kubelet's container stats: every process of
// a container runs in a guest cgroup of its own (the agent's
// Start.Cgroup), whose counters the guest reads. They are the guest's
// view: memory is what the container holds of the VM's RAM, and CPU time
// is time on the VM's vCPUs.
func (s *service) Stats(ctx context.Context, r *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
	m, err := s.machineOf(r.ID)
	if err != nil {
		return nil, err
	}
	if err := s.booted(ctx); err != nil {
		return nil, err
	}
	st, err := m.CgroupStats(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("container %s: stats: %w", r.ID, err)
	}
	data, err := typeurl.MarshalAny(cgroupMetrics(st))
	if err != nil {
		return nil, err
	}
	return &taskapi.StatsResponse{Stats: data}, nil
}

// machineOf returns the machine container id runs in.
func (s *service) machineOf(id string) (*smol.NamedMachine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containers[id] == nil {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return s.machine, nil
}

// cgroupMetrics is the guest cgroup's use in containerd's cgroup v2 form.
func cgroupMetrics(st smol.CgroupStats) *v2stats.Metrics {
	return &v2stats.Metrics{
		Pids: &v2stats.PidsStat{Current: st.Pids},
		CPU:  &v2stats.CPUStat{UsageUsec: st.CPUUsageUsec, UserUsec: st.CPUUserUsec, SystemUsec: st.CPUSystemUsec},
		Memory: &v2stats.MemoryStat{Usage: st.MemoryUsage, UsageLimit: st.MemoryLimit, Anon: st.Anon, File: st.File,
			ActiveFile: st.ActiveFile, InactiveFile: st.InactiveFile, Pgfault: st.PageFaults, Pgmajfault: st.MajorFaults},
	}
}
