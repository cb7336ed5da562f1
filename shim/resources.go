package shim

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/errdefs"
	taskapi "github.com/containerd/containerd/runtime/v2/task"
	"github.com/containerd/typeurl"
	ptypes "github.com/gogo/protobuf/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/smolvm/smol"
)

// A container's resources (the OCI spec's linux.resources, kubelet's
// requests and limits) are limits on its guest cgroup, which every one of
// its processes runs in: memory.max, pids.max, cpu.weight and cpu.max,
// set before its first process starts and again on Update. Devices,
// cpusets, block I/O and huge pages are the VM's, not a container's: the
// VM has only the devices and vCPUs smol gave it, so those parts are not
// applied.

// cgroupLimits are an OCI container's resources as guest cgroup limits;
// nil without any (the cgroup then has none).
func cgroupLimits(r *specs.LinuxResources) *smol.CgroupLimits {
	if r == nil {
		return nil
	}
	var l smol.CgroupLimits
	if m := r.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
		l.MemoryMax = uint64(*m.Limit)
	}
	if p := r.Pids; p != nil && p.Limit != nil && *p.Limit > 0 {
		l.PidsMax = uint64(*p.Limit)
	}
	if c := r.CPU; c != nil {
		if c.Shares != nil && *c.Shares != 0 {
			l.CPUWeight = cpuWeight(*c.Shares)
		}
		if c.Quota != nil && *c.Quota > 0 {
			l.CPUQuotaUsec = uint64(*c.Quota)
			if c.Period != nil {
				l.CPUPeriodUsec = *c.Period
			}
		}
	}
	return &l
}

// cpuWeight maps cgroup v1 CPU shares (2 to 262144, what the OCI spec
// and kubelet speak) onto cgroup v2's weight (1 to 10000) linearly, the
// conversion runc and crun use, so a pod weighs the same under either.
func cpuWeight(shares uint64) uint64 {
	shares = min(max(shares, 2), 262144)
	return 1 + (shares-2)*9999/262142
}

// Update sets a running container's resources (CRI's
// UpdateContainerResources).
func (s *service) Update(ctx context.Context, r *taskapi.UpdateTaskRequest) (*ptypes.Empty, error) {
	m, err := s.machineOf(r.ID)
	if err != nil {
		return nil, err
	}
	if r.Resources == nil {
		return nil, fmt.Errorf("container %s: an update without resources: %w", r.ID, errdefs.ErrInvalidArgument)
	}
	v, err := typeurl.UnmarshalAny(r.Resources)
	if err != nil {
		return nil, fmt.Errorf("container %s: update: %w", r.ID, err)
	}
	res, ok := v.(*specs.LinuxResources)
	if !ok {
		return nil, fmt.Errorf("container %s: update with %T, not Linux resources: %w", r.ID, v, errdefs.ErrInvalidArgument)
	}
	limits := cgroupLimits(res)
	if err := limits.Validate(); err != nil {
		return nil, fmt.Errorf("container %s: %v: %w", r.ID, err, errdefs.ErrInvalidArgument)
	}
	if err := s.booted(ctx); err != nil {
		return nil, err
	}
	if err := m.SetCgroupLimits(ctx, r.ID, *limits); err != nil {
		return nil, fmt.Errorf("container %s: update: %w", r.ID, err)
	}
	return &ptypes.Empty{}, nil
}
