package vmm

import (
	"os"
	"reflect"
	"runtime/debug"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestExecutableMappings(t *testing.T) {
	maps := []byte(`00400000-007eb000 r-xp 00000000 fd:01 1234                               /usr/bin/smol
007eb000-00c26000 r--p 003eb000 fd:01 1234                               /usr/bin/smol
00c26000-00c86000 rw-p 00826000 fd:01 1234                               /usr/bin/smol
00c86000-02ccf000 rw-p 00000000 00:00 0
7f0000000000-7f0000100000 r--p 00000000 fd:01 99                         /usr/lib/other
7f0000100000-7f0000200000 r--p 00000000 fd:02 1234                       /mnt/same-inode-other-device
7f9f09ea0000-7f9f19ea0000 rw-s 00000000 00:01 2050                       /memfd:smol-guest-ram (deleted)
garbage line
`)
	got := executableMappings(maps, unix.Mkdev(0xfd, 1), 1234)
	want := []addrRange{{0x400000, 0x7eb000}, {0x7eb000, 0xc26000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("executableMappings = %#x, want %#x", got, want)
	}
}

// TestExecutableMappingsSelf finds this test binary's own code in its
// mappings, as releaseStartupPages does for the VMM.
func TestExecutableMappingsSelf(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		t.Skip(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	rs := executableMappings(maps, st.Dev, st.Ino)
	if len(rs) == 0 {
		t.Fatalf("no read-only mapping of the executable in\n%s", maps)
	}
	pc := reflect.ValueOf(TestExecutableMappingsSelf).Pointer()
	for _, r := range rs {
		if uint64(pc) >= r.start && uint64(pc) < r.end {
			return
		}
	}
	t.Fatalf("this function's code (%#x) is in none of %#x", pc, rs)
}

func TestReleaseStartupPagesKeepsRunning(t *testing.T) {
	releaseStartupPages()
	// The released code and data fault back in: the test still runs and
	// its tables still read.
	if got := executableMappings([]byte("00400000-00401000 r-xp 00000000 00:01 7 /x\n"), unix.Mkdev(0, 1), 7); len(got) != 1 {
		t.Fatalf("after release: %v", got)
	}
}

// TestSetGCPercent: a running VMM collects at gcPercent, unless GOGC was
// given.
func TestSetGCPercent(t *testing.T) {
	if v, set := os.LookupEnv("GOGC"); set {
		t.Skipf("GOGC=%s is the user's choice", v)
	}
	setGCPercent()
	got := debug.SetGCPercent(gcPercent)
	if got != gcPercent {
		t.Fatalf("GOGC after setGCPercent: %d, want %d", got, gcPercent)
	}
}
