package smol

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseVolume(t *testing.T) {
	for in, want := range map[string]Volume{
		"/a:/b":           {Host: "/a", Guest: "/b"},
		"/a:/b:ro":        {Host: "/a", Guest: "/b", ReadOnly: true},
		"/a:/b:rw":        {Host: "/a", Guest: "/b"},
		"./with:colon:/b": {Host: "./with:colon", Guest: "/b"},
	} {
		if got, err := ParseVolume(in); err != nil || got != want {
			t.Errorf("ParseVolume(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"/a", ":/b", "/a:", "/a:ro"} {
		if _, err := ParseVolume(bad); err == nil {
			t.Errorf("ParseVolume(%q) accepted", bad)
		}
	}
}

// TestCheckVolumes: every mistake is found before a VM exists, named.
func TestCheckVolumes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	if vols, err := checkVolumes([]Volume{{Host: dir, Guest: "/work", Setuid: true}}); err != nil || vols[0].Host != dir || !vols[0].Setuid {
		t.Fatalf("a good volume: %v %v", vols, err)
	}
	for want, vols := range map[string][]Volume{
		"no such file":     {{Host: filepath.Join(dir, "none"), Guest: "/w"}},
		"not a directory":  {{Host: file, Guest: "/w"}},
		"clean absolute":   {{Host: dir, Guest: "w"}},
		"other than /":     {{Host: dir, Guest: "/"}},
		"not under /proc":  {{Host: dir, Guest: "/proc/x"}},
		"letters, digits":  {{Host: dir, Guest: "/a b"}},
		"given twice":      {{Host: dir, Guest: "/w"}, {Host: dir, Guest: "/w"}},
		"clean absolute p": {{Host: dir, Guest: "/a/../b"}},
	} {
		if _, err := checkVolumes(vols); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(want, " p")) {
			t.Errorf("%v: %v, want %q", vols, err, want)
		}
	}
	if os.Geteuid() != 0 {
		locked := filepath.Join(dir, "locked")
		os.Mkdir(locked, 0o000)
		if _, err := checkVolumes([]Volume{{Host: locked, Guest: "/w"}}); err == nil {
			t.Error("an unreadable directory accepted")
		}
	}
	shares, cmdline := volumeDevices([]Volume{{Host: "/a", Guest: "/x"}, {Host: "/b", Guest: "/y", ReadOnly: true}, {Host: "/c", Guest: "/z", Setuid: true}})
	if len(shares) != 3 || shares[1].Tag != "smol1" || !shares[1].ReadOnly || cmdline != "smol.shares=smol0:/x,smol1:/y:ro,smol2:/z:suid" {
		t.Errorf("volumeDevices: %+v %q", shares, cmdline)
	}
}
