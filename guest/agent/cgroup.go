package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/smolvm/smol/agent"
	"golang.org/x/sys/unix"
)

// Containers' cgroups: a command with Start.Cgroup runs in
// /sys/fs/cgroup/smol/<name> (cgroup v2, mounted and given its memory and
// pids controllers on first use), placed there by clone3 as it is born
// (CLONE_INTO_CGROUP), so no process of a container is ever counted
// outside it, or outside its limits: a Start's Limits are written before
// its command is born, an Update request writes them anew. A Stats
// request reads the group's counters. The agent itself and plain
// commands stay in the root group.

const cgroupRoot = "/sys/fs/cgroup"

// containerCgroups is the parent of the containers' cgroups.
var containerCgroups = filepath.Join(cgroupRoot, "smol")

var cgroupSetup struct {
	once sync.Once
	err  error
	cpu  bool // the cpu controller is on: cpu.weight and cpu.max exist
}

// setupCgroups mounts cgroup v2 and makes the containers' parent group
// with the controllers Stats reads and limits use, once. The cpu
// controller is optional (a kernel without group scheduling): only a CPU
// limit needs it, and that then fails saying so.
func setupCgroups() error {
	cgroupSetup.once.Do(func() {
		var fs unix.Statfs_t
		if err := unix.Statfs(cgroupRoot, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
			if err := unix.Mount("cgroup2", cgroupRoot, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
				cgroupSetup.err = fmt.Errorf("mount cgroup2 on %s: %w", cgroupRoot, err)
				return
			}
		}
		if err := os.Mkdir(containerCgroups, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cgroupSetup.err = err
			return
		}
		cgroupSetup.cpu = true
		for _, dir := range []string{cgroupRoot, containerCgroups} {
			control := filepath.Join(dir, "cgroup.subtree_control")
			if err := os.WriteFile(control, []byte("+memory +pids"), 0); err != nil {
				cgroupSetup.err = fmt.Errorf("enable the memory and pids controllers in %s: %w", dir, err)
				return
			}
			if cgroupSetup.cpu && os.WriteFile(control, []byte("+cpu"), 0) != nil {
				cgroupSetup.cpu = false
			}
		}
	})
	return cgroupSetup.err
}

// openCgroup returns a descriptor of container cgroup name, made if
// missing, for clone3's CLONE_INTO_CGROUP.
func openCgroup(name string) (int, error) {
	if err := agent.ValidCgroupName(name); err != nil {
		return -1, err
	}
	if err := setupCgroups(); err != nil {
		return -1, err
	}
	dir := filepath.Join(containerCgroups, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, fmt.Errorf("cgroup %s: %w", name, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cgroup %s: %w", name, err)
	}
	return fd, nil
}

// setLimits writes limits into container cgroup name's files (the cgroup
// made if missing); an unset limit is written as none, so that the files
// say exactly what limits says.
func setLimits(name string, limits *agent.CgroupLimits) error {
	fd, err := openCgroup(name)
	if err != nil {
		return err
	}
	unix.Close(fd)
	dir := filepath.Join(containerCgroups, name)
	for _, f := range limitFiles(limits, cgroupSetup.cpu) {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.value), 0); err != nil {
			return fmt.Errorf("cgroup %s: %s %q: %w", name, f.name, f.value, err)
		}
	}
	if !cgroupSetup.cpu && (limits.CPUWeight != 0 || limits.CPUQuotaUsec != 0) {
		return fmt.Errorf("cgroup %s: a CPU limit, and this guest kernel has no cpu controller", name)
	}
	return nil
}

type cgroupFile struct{ name, value string }

// limitFiles are the cgroup files and values that say limits; the cpu
// controller's only when it is on.
func limitFiles(l *agent.CgroupLimits, cpu bool) []cgroupFile {
	orNone := func(v uint64) string {
		if v == 0 {
			return "max"
		}
		return strconv.FormatUint(v, 10)
	}
	files := []cgroupFile{{"memory.max", orNone(l.MemoryMax)}, {"pids.max", orNone(l.PidsMax)}}
	if cpu {
		weight, period := l.CPUWeight, l.CPUPeriodUsec
		if weight == 0 {
			weight = 100
		}
		if period == 0 {
			period = agent.DefaultCPUPeriodUsec
		}
		files = append(files, cgroupFile{"cpu.weight", strconv.FormatUint(weight, 10)},
			cgroupFile{"cpu.max", orNone(l.CPUQuotaUsec) + " " + strconv.FormatUint(period, 10)})
	}
	return files
}

// oomKills is how many processes the OOM killer has ended in container
// cgroup name (memory.events' oom_kill); 0 when it cannot be read.
func oomKills(name string) uint64 {
	events, _ := readKeyed(filepath.Join(containerCgroups, name, "memory.events"))
	return events["oom_kill"]
}

// update answers an Update request.
func (s *session) update(name string, limits *agent.CgroupLimits) agent.Exit {
	if err := setLimits(name, limits); err != nil {
		return agent.Exit{Code: 1, Error: err.Error()}
	}
	return agent.Exit{}
}

// stats answers a Stats request: the cgroup's counters as one Stdout
// frame of JSON. A container asked for before its first process reached
// the guest has its cgroup made here, and counts nothing yet.
func (s *session) stats(name string) agent.Exit {
	fd, err := openCgroup(name)
	if err != nil {
		return agent.Exit{Code: 1, Error: err.Error()}
	}
	unix.Close(fd)
	st, err := readCgroupStats(filepath.Join(containerCgroups, name))
	if err != nil {
		return agent.Exit{Code: 1, Error: fmt.Sprintf("cgroup %s: %v", name, err)}
	}
	b, _ := json.Marshal(st) // plain numbers: cannot fail
	if err := s.w.Write(agent.FrameStdout, b); err != nil {
		return agent.Exit{Code: 1, Error: err.Error()}
	}
	return agent.Exit{}
}

// readCgroupStats reads a cgroup v2 directory's counters.
func readCgroupStats(dir string) (agent.CgroupStats, error) {
	var st agent.CgroupStats
	cpu, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return st, err
	}
	st.CPUUsageUsec, st.CPUUserUsec, st.CPUSystemUsec = cpu["usage_usec"], cpu["user_usec"], cpu["system_usec"]
	mem, err := readKeyed(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return st, err
	}
	st.Anon, st.File, st.ActiveFile, st.InactiveFile = mem["anon"], mem["file"], mem["active_file"], mem["inactive_file"]
	st.PageFaults, st.MajorFaults = mem["pgfault"], mem["pgmajfault"]
	if st.MemoryUsage, err = readNumber(filepath.Join(dir, "memory.current")); err != nil {
		return st, err
	}
	if limit, err := readNumber(filepath.Join(dir, "memory.max")); err == nil {
		st.MemoryLimit = limit // "max" (none) fails to parse and stays 0
	}
	if st.Pids, err = readNumber(filepath.Join(dir, "pids.current")); err != nil {
		return st, err
	}
	return st, nil
}

// readKeyed reads a "key value" per line cgroup file.
func readKeyed(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}

// readNumber reads a cgroup file holding one number.
func readNumber(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
