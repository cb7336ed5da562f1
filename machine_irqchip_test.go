package smol

import (
	"strings"
	"testing"
)

// TestMachineRecordsItsIRQChip: a machine's record names the irqchip its
// cold starts get, the default spelled out so that a later smol with
// another default starts it the same way; a name that is none is refused.
func TestMachineRecordsItsIRQChip(t *testing.T) {
	for in, want := range map[string]string{"": string(DefaultIRQChip), "split": "split", "kernel": "kernel"} {
		spec, err := newSpec(MachineConfig{Name: "m", IRQChip: in})
		if err != nil {
			t.Fatalf("IRQChip %q: %v", in, err)
		}
		if spec.IRQChip != want {
			t.Errorf("IRQChip %q recorded as %q, want %q", in, spec.IRQChip, want)
		}
	}
	if _, err := newSpec(MachineConfig{Name: "m", IRQChip: "userspace"}); err == nil || !strings.Contains(err.Error(), `irqchip "userspace"`) {
		t.Errorf("IRQChip userspace: %v, want a refusal naming it", err)
	}
}
