package tap

import (
	"strings"
	"testing"
)

func TestParseMAC(t *testing.T) {
	for _, ok := range []string{"02:00:00:aa:bb:cc", "52-54-00-12-34-56", "0200.00aa.bbcc", "00:16:3e:00:00:01"} {
		if _, err := ParseMAC(ok); err != nil {
			t.Errorf("ParseMAC(%q): %v", ok, err)
		}
	}
	for in, why := range map[string]string{
		"":                        "",
		"02:00:00:aa:bb":          "",
		"02:00:00:aa:bb:cc:dd:ee": "octets",
		"01:00:5e:00:00:01":       "multicast",
		"ff:ff:ff:ff:ff:ff":       "broadcast",
		"00:00:00:00:00:00":       "zeros",
		"02:00:00:aa:bb:zz":       "",
	} {
		_, err := ParseMAC(in)
		if err == nil {
			t.Errorf("ParseMAC(%q) accepted", in)
			continue
		}
		if !strings.Contains(err.Error(), why) {
			t.Errorf("ParseMAC(%q): %v, want it to mention %q", in, err, why)
		}
	}
}

func TestMACFromName(t *testing.T) {
	a, b := MACFromName("tap0"), MACFromName("tap1")
	if a.String() != MACFromName("tap0").String() {
		t.Error("MACFromName is not deterministic")
	}
	if a.String() == b.String() {
		t.Errorf("tap0 and tap1 share %v", a)
	}
	for _, mac := range []string{a.String(), b.String()} {
		if _, err := ParseMAC(mac); err != nil {
			t.Errorf("derived MAC %s is not a valid NIC address: %v", mac, err)
		}
	}
	if a[0]&macLocallyAdmined == 0 {
		t.Errorf("%v is not locally administered", a)
	}
	r1, err := RandomMAC()
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := RandomMAC()
	if r1.String() == r2.String() || r1[0]&macMulticast != 0 || r1[0]&macLocallyAdmined == 0 {
		t.Errorf("random MACs %v %v", r1, r2)
	}
}
