package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParseHost parses an --allow-host value: NAME, *.NAME or either with
// :PORT. Names are DNS host names (letters, digits, hyphens; labels of 1-63
// bytes, 253 in all); a wildcard matches subdomains only.
func ParseHost(s string) (HostRule, error) {
	var r HostRule
	name := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		port, err := ParsePort(s[i+1:])
		if err != nil {
			return r, fmt.Errorf("--allow-host %q: %w", s, err)
		}
		name, r.Port = s[:i], port
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, r.Wildcard = rest, true
	}
	name = canonicalName(name)
	if err := checkHostName(name); err != nil {
		return r, fmt.Errorf("--allow-host %q: %w", s, err)
	}
	r.Name = name
	return r, nil
}

func checkHostName(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if len(name) > 253 {
		return fmt.Errorf("host name longer than 253 bytes")
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return fmt.Errorf("an address, not a host name (use --allow-cidr)")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("label %q: want 1 to 63 bytes", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q begins or ends with a hyphen", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("label %q: %q is not a letter, digit or hyphen", label, c)
			}
		}
	}
	return nil
}

// ParseCIDR parses an --allow-cidr value: an address or prefix, optionally
// with :PORT; an IPv6 prefix with a port is written [PREFIX]:PORT.
func ParseCIDR(s string) (CIDRRule, error) {
	var r CIDRRule
	addr := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return r, fmt.Errorf("--allow-cidr %q: missing ]", s)
		}
		addr = s[1:end]
		if rest := s[end+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return r, fmt.Errorf("--allow-cidr %q: want [PREFIX]:PORT", s)
			}
			port, err := ParsePort(p)
			if err != nil {
				return r, fmt.Errorf("--allow-cidr %q: %w", s, err)
			}
			r.Port = port
		}
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		port, err := ParsePort(s[i+1:])
		if err != nil {
			return r, fmt.Errorf("--allow-cidr %q: %w", s, err)
		}
		addr, r.Port = s[:i], port
	}
	if strings.Contains(addr, "/") {
		p, err := netip.ParsePrefix(addr)
		if err != nil {
			return r, fmt.Errorf("--allow-cidr %q: not a CIDR prefix", s)
		}
		r.Prefix = p.Masked()
	} else {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return r, fmt.Errorf("--allow-cidr %q: not an address or CIDR prefix", s)
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
	}
	return r, nil
}

// ParsePort parses a port number, 1 to 65535, for every flag that
// names one.
func ParsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return uint16(n), nil
}

// ParseRules parses the --allow-host and --allow-cidr values of one
// guest, refusing duplicates.
func ParseRules(hosts, cidrs []string) (Config, error) {
	var cfg Config
	seen := map[string]bool{}
	for _, s := range hosts {
		r, err := ParseHost(s)
		if err != nil {
			return Config{}, err
		}
		if seen["host "+r.String()] {
			return Config{}, fmt.Errorf("--allow-host %q is given twice", s)
		}
		seen["host "+r.String()] = true
		cfg.Hosts = append(cfg.Hosts, r)
	}
	for _, s := range cidrs {
		r, err := ParseCIDR(s)
		if err != nil {
			return Config{}, err
		}
		if seen["cidr "+r.String()] {
			return Config{}, fmt.Errorf("--allow-cidr %q is given twice", s)
		}
		seen["cidr "+r.String()] = true
		cfg.CIDRs = append(cfg.CIDRs, r)
	}
	return cfg, nil
}
