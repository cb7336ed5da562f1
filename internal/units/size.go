// Package units parses the human-readable sizes the CLI and the
// environment take (512M, 8G).
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads a size: a number with an optional binary unit (K, M, G,
// T, optionally followed by "iB" or "B"), case-insensitive. A bare number
// is MiB, as in QEMU's -m.
func ParseSize(s string) (uint64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := 20
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			shift, t = 10, t[:n-1]
		case 'M':
			shift, t = 20, t[:n-1]
		case 'G':
			shift, t = 30, t[:n-1]
		case 'T':
			shift, t = 40, t[:n-1]
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a size (try 512M or 8G)", s)
	}
	if n > (1<<63)>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n << shift, nil
}

// FormatSize prints a byte count for people, in binary units.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", (n+1023)/1024)
}
