package machine

import (
	"fmt"
	"strconv"
	"strings"
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

// MaxHostnameLen is the kernel's limit on a host name (HOST_NAME_MAX).
const MaxHostnameLen = 64

// ValidateHostname checks a guest host name (Spec.Hostname): RFC 1123's
// letters, digits, '-' and '.', in labels that neither start nor end
// with '-', at most MaxHostnameLen bytes. The guest's agent sets it, and
// programs there print it: nothing else may get through.
func ValidateHostname(h string) error {
	bad := func() error {
		return fmt.Errorf("host name %s: use letters, digits and '-' in labels separated by '.', at most %d characters", strconv.Quote(h), MaxHostnameLen)
	}
	if h == "" || len(h) > MaxHostnameLen {
		return bad()
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return bad()
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return bad()
			}
		}
	}
	return nil
}
