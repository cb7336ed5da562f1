package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestParseShares: every share is nodev; nosuid unless it says suid;
// read-only when it says ro; anything else is refused.
func TestParseShares(t *testing.T) {
	got, err := parseShares("smol0:/run/smol/roots:suid,smol1:/data:ro,smol2:/w,smol3:/x:ro:suid")
	if err != nil {
		t.Fatal(err)
	}
	want := []share{
		{"smol0", "/run/smol/roots", unix.MS_NODEV},
		{"smol1", "/data", unix.MS_NODEV | unix.MS_NOSUID | unix.MS_RDONLY},
		{"smol2", "/w", unix.MS_NODEV | unix.MS_NOSUID},
		{"smol3", "/x", unix.MS_NODEV | unix.MS_RDONLY},
	}
	if len(got) != len(want) {
		t.Fatalf("%d shares, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("share %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"smol0", "smol0:data", ":/data", "smol0:/data:rw", "smol0:/data:ro:suid:x", "smol0:/data:dev"} {
		if _, err := parseShares(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	if s, err := parseShares(""); s != nil || err != nil {
		t.Errorf("no shares: %v, %v", s, err)
	}
}
