package smol

import (
	"errors"
	"strings"
	"testing"
)

// TestServeMachineArgsRefusesWhatAStarterNeverPasses: the hidden VMM
// command's arguments are checked before anything is served.
func TestServeMachineArgsRefusesWhatAStarterNeverPasses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "name is missing"},
		{[]string{"a", "b"}, "one machine name"},
		{[]string{"a", "--bogus"}, "unknown flag --bogus"},
		{[]string{"a", "--ready-fd"}, "needs a value"},
		{[]string{"a", "--ready-fd", "2"}, "above 2"},
		{[]string{"a", "--ram-fd", "3"}, "goes with --restore"},
		{[]string{"a", "--restore", "s", "--ram-fd", "3", "--ready-fd", "3"}, "not the RAM's"},
		{[]string{"a", "--restore", "s", "--ram-overlay-fd", "4"}, "goes with --ram-fd"},
		{[]string{"a", "--restore", "s", "--ram-fd", "3", "--ram-overlay-fd", "5"}, "is 4"},
		{[]string{"a", "--restore", "s", "--ram-fd", "3", "--ram-overlay-fd", "4", "--ready-fd", "4"}, "not the RAM's"},
	} {
		err := ServeMachineArgs(tc.args)
		var u *VMMUsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
