package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b\134c`: `/a b\c`,
		`/plain`:       `/plain`,
		`/cut\04`:      `/cut\04`, // too short to be an escape
		`/not\9zz`:     `/not\9zz`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
