package smol

import "github.com/smolvm/smol/internal/units"

// ParseSize reads a memory size: a number with an optional binary unit (K,
// M, G, T, optionally followed by "iB" or "B"), case-insensitive. A bare
// number is MiB, as in QEMU's -m.
func ParseSize(s string) (uint64, error) { return units.ParseSize(s) }
