package tap

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"", "tap0", "smol-vm.1", "abcdefghijklmno"} {
		if err := validName(ok); err != nil {
			t.Errorf("validName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"abcdefghijklmnop", ".", "..", "a/b", "a:b", "a b", "a\tb", "a\x7f"} {
		if err := validName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("validName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	if _, err := Create("much-too-long-name"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Create with a long name: %v", err)
	}
}

func TestErrorsExplainThemselves(t *testing.T) {
	err := describeSetIffError("tap7", syscall.EPERM)
	if !errors.Is(err, ErrNeedsNetAdmin) || !errors.Is(err, syscall.EPERM) {
		t.Errorf("EPERM: %v does not match ErrNeedsNetAdmin and EPERM", err)
	}
	if !strings.HasPrefix(err.Error(), "creating TAP tap7 needs CAP_NET_ADMIN") {
		t.Errorf("EPERM message %q", err)
	}
	if err := describeSetIffError("tap7", syscall.EBUSY); !errors.Is(err, ErrBusy) {
		t.Errorf("EBUSY: %v", err)
	}
	if err := describeSetIffError("eth0", syscall.EINVAL); !errors.Is(err, ErrNotTAP) {
		t.Errorf("EINVAL: %v", err)
	}
	if err := describeOpenError("tap7", syscall.ENOENT); !errors.Is(err, ErrNoTunDevice) {
		t.Errorf("ENOENT: %v", err)
	}
	if err := describeLinkError("tap7", "bringing up", syscall.EPERM); !errors.Is(err, ErrNeedsNetAdmin) {
		t.Errorf("netlink EPERM: %v", err)
	}
}

func TestTunOffloads(t *testing.T) {
	for _, c := range []struct {
		features uint64
		want     int
	}{
		{0, 0},
		{featureGuestTSO4 | featureGuestTSO6, 0}, // TSO without checksum offload is meaningless
		{featureGuestCsum, 0x1},
		{featureGuestCsum | featureGuestTSO4, 0x3},
		{featureGuestCsum | featureGuestTSO4 | featureGuestTSO6 | featureGuestECN, 0xf},
		{featureGuestCsum | featureGuestECN, 0x1},
		{hostOffloads, 0},
	} {
		if got := tunOffloads(c.features); got != c.want {
			t.Errorf("tunOffloads(%#x) = %#x, want %#x", c.features, got, c.want)
		}
	}
}
