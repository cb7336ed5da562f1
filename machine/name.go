package machine

import (
	"fmt"
	"strconv"
)

// MaxNameLen bounds a machine name: it becomes a directory and a socket
// path, and Unix socket paths are short (108 bytes).
const MaxNameLen = 48

// ValidateName accepts names of letters, digits, '-', '_' and '.', that
// start with a letter or digit: safe as a file name and in any message.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("a machine needs a name")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("machine name of %d characters: at most %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return fmt.Errorf("machine name %s: use letters, digits, '-', '_' and '.', starting with a letter or digit", strconv.Quote(name))
		}
	}
	return nil
}
