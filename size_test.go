package smol

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]uint64{"512M": 512 << 20, "8G": 8 << 30, "8g": 8 << 30, "1GiB": 1 << 30, "64": 64 << 20, "4096K": 4 << 20, "2T": 2 << 40, "100MB": 100 << 20}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "abc", "12X", "-1G", "0", "1.5G", "G", "99999999999999999999T"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
