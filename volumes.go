package smol

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/vmm"
	"golang.org/x/sys/unix"
)

// Volume is a host directory the guest sees at Guest (smol run -v
// HOST:GUEST[:ro]): machine.Volume, one type for a run's volumes and a
// named machine's, which its spec file stores.
type Volume = machine.Volume

// MaxVolumes bounds a VM's volumes.
const MaxVolumes = 16

// ParseVolume reads HOST:GUEST[:ro|:rw]; HOST may be relative (to the
// working directory).
func ParseVolume(s string) (Volume, error) {
	v := Volume{}
	rest := s
	if r, ok := strings.CutSuffix(rest, ":ro"); ok {
		rest, v.ReadOnly = r, true
	} else if r, ok := strings.CutSuffix(rest, ":rw"); ok {
		rest = r
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return Volume{}, fmt.Errorf("-v %q: want HOST:GUEST[:ro]", s)
	}
	v.Host, v.Guest = rest[:i], rest[i+1:]
	return v, nil
}

// checkVolumes validates volumes before anything boots, and returns them
// with absolute host paths.
func checkVolumes(vols []Volume) ([]Volume, error) {
	if len(vols) > MaxVolumes {
		return nil, fmt.Errorf("%d volumes: at most %d", len(vols), MaxVolumes)
	}
	seen := map[string]bool{}
	out := make([]Volume, len(vols))
	for i, v := range vols {
		if err := checkGuestPath(v.Guest); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Host, err)
		}
		if seen[v.Guest] {
			return nil, fmt.Errorf("volume guest path %s given twice", v.Guest)
		}
		seen[v.Guest] = true
		host, err := filepath.Abs(v.Host)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(host)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Host, errors.Unwrap(err))
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("volume %s is not a directory", v.Host)
		}
		mode := uint32(unix.R_OK | unix.X_OK)
		if !v.ReadOnly {
			mode |= unix.W_OK
		}
		if err := unix.Access(host, mode); err != nil {
			return nil, fmt.Errorf("volume %s: %v for this user", v.Host, err)
		}
		v.Host = host
		out[i] = v
	}
	return out, nil
}

// checkGuestPath refuses a guest mount point that is not a plain absolute
// path: it travels on the kernel command line.
func checkGuestPath(p string) error {
	if !strings.HasPrefix(p, "/") || filepath.Clean(p) != p || p == "/" {
		return fmt.Errorf("guest path %q: want a clean absolute path other than /", p)
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+@", c)) {
			return fmt.Errorf("guest path %q: use letters, digits and /._-+@", p)
		}
	}
	for _, top := range []string{"/proc", "/sys", "/dev"} {
		if p == top || strings.HasPrefix(p, top+"/") {
			return fmt.Errorf("guest path %q: not under %s", p, top)
		}
	}
	return nil
}

// volumeDevices gives the VMM one share per volume and the agent the
// kernel command line that mounts them (smol.shares=TAG:PATH[:ro][:suid],...).
func volumeDevices(vols []Volume) ([]vmm.Share, string) {
	if len(vols) == 0 {
		return nil, ""
	}
	var shares []vmm.Share
	var spec []string
	for i, v := range vols {
		tag := "smol" + strconv.Itoa(i)
		shares = append(shares, vmm.Share{Path: v.Host, Tag: tag, ReadOnly: v.ReadOnly})
		item := tag + ":" + v.Guest
		if v.ReadOnly {
			item += ":ro"
		}
		if v.Setuid {
			item += ":suid"
		}
		spec = append(spec, item)
	}
	return shares, "smol.shares=" + strings.Join(spec, ",")
}
