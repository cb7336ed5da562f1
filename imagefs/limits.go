package imagefs

import (
	"fmt"
	"os"
	"strconv"

	"github.com/smolvm/smol/internal/units"
)

// Limits bound what one image may unpack to, so that a compressed bomb
// fails within seconds instead of filling the disk under the cache. They
// are enforced while the layers stream, before the bytes are written.
type Limits struct {
	MaxBytes   int64 // uncompressed file data plus names, link targets and xattrs, over all layers
	MaxEntries int   // tar entries (and implied directories), over all layers
}

// Defaults: big enough for any real image (the largest common ones, CUDA
// and ML stacks, are 10-20 GiB unpacked), small enough that a bomb fails
// long before a disk fills.
const (
	DefaultMaxBytes   = 32 << 30
	DefaultMaxEntries = 2_000_000

	envMaxSize    = "SMOL_MAX_IMAGE_SIZE"
	envMaxEntries = "SMOL_MAX_IMAGE_ENTRIES"
)

// LimitsFromEnv reads SMOL_MAX_IMAGE_SIZE (a size such as 1G or 500M) and
// SMOL_MAX_IMAGE_ENTRIES, defaulting what is unset.
func LimitsFromEnv() (Limits, error) {
	l := Limits{MaxBytes: DefaultMaxBytes, MaxEntries: DefaultMaxEntries}
	if v := os.Getenv(envMaxSize); v != "" {
		n, err := units.ParseSize(v)
		if err != nil {
			return l, fmt.Errorf("%s: %w", envMaxSize, err)
		}
		l.MaxBytes = int64(min(n, 1<<50))
	}
	if v := os.Getenv(envMaxEntries); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return l, fmt.Errorf("%s=%q is not a positive number", envMaxEntries, v)
		}
		l.MaxEntries = n
	}
	return l, nil
}

// orDefaults fills what is zero from the environment and the defaults.
func (l Limits) orDefaults() (Limits, error) {
	if l.MaxBytes > 0 && l.MaxEntries > 0 {
		return l, nil
	}
	env, err := LimitsFromEnv()
	if err != nil {
		return l, err
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = env.MaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = env.MaxEntries
	}
	return l, nil
}

// LimitError reports an image over one of its limits.
type LimitError struct {
	What  string // "bytes" or "entries"
	Limit int64
	Env   string // the variable that raises it
}

func (e *LimitError) Error() string {
	if e.What == "bytes" {
		return fmt.Sprintf("image unpacks to more than %s (raise the limit with %s)", humanBytes(float64(e.Limit)), e.Env)
	}
	return fmt.Sprintf("image has more than %d entries (raise the limit with %s)", e.Limit, e.Env)
}

// quoteShort quotes image-chosen text for a message, cut to a readable
// length, so that no control byte of it reaches the terminal.
func quoteShort(s string) string {
	const max = 120
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}
