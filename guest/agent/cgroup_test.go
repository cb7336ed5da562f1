package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/smolvm/smol/agent"
)

// TestReadCgroupStats reads a cgroup v2 directory's files as the kernel
// writes them (a limit of "max" is none), and fails on a missing one.
func TestReadCgroupStats(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"cpu.stat":       "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 0\n",
		"memory.stat":    "anon 5242880\nfile 3145728\nkernel 12\nactive_file 1048576\ninactive_file 2097152\npgfault 77\npgmajfault 3\n",
		"memory.current": "8388608\n",
		"memory.max":     "max\n",
		"pids.current":   "4\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readCgroupStats(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := agent.CgroupStats{CPUUsageUsec: 1500, CPUUserUsec: 1000, CPUSystemUsec: 500, MemoryUsage: 8 << 20,
		Anon: 5 << 20, File: 3 << 20, ActiveFile: 1 << 20, InactiveFile: 2 << 20, PageFaults: 77, MajorFaults: 3, Pids: 4}
	if got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
	os.WriteFile(filepath.Join(dir, "memory.max"), []byte("67108864\n"), 0o644)
	if got, _ := readCgroupStats(dir); got.MemoryLimit != 64<<20 {
		t.Errorf("limit %d, want 64 MiB", got.MemoryLimit)
	}
	os.Remove(filepath.Join(dir, "pids.current"))
	if _, err := readCgroupStats(dir); err == nil {
		t.Error("a cgroup without pids.current read as whole")
	}
}

// TestLimitFiles: every limit is written, an unset one as none, and the
// cpu controller's files only when it is on.
func TestLimitFiles(t *testing.T) {
	l := &agent.CgroupLimits{MemoryMax: 64 << 20, CPUWeight: 39, CPUQuotaUsec: 50000}
	got := limitFiles(l, true)
	want := []cgroupFile{{"memory.max", "67108864"}, {"pids.max", "max"}, {"cpu.weight", "39"}, {"cpu.max", "50000 100000"}}
	if !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	got = limitFiles(&agent.CgroupLimits{PidsMax: 10, CPUPeriodUsec: 250000}, true)
	want = []cgroupFile{{"memory.max", "max"}, {"pids.max", "10"}, {"cpu.weight", "100"}, {"cpu.max", "max 250000"}}
	if !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if got := limitFiles(l, false); len(got) != 2 {
		t.Errorf("without the cpu controller: %v", got)
	}
}
