package smol

import (
	"context"
	"fmt"
	"image"

	"github.com/smolvm/smol/machine"
)

// ErrNoDisplay says a machine has no display: it was started without a
// GPU (Config.GPU, MachineConfig.GPU, --gpu).
var ErrNoDisplay = machine.ErrNoDisplay

// Screenshot returns what the VM's display shows now, as the guest last
// transferred it to the host.
func (m *Machine) Screenshot() (*image.RGBA, error) {
	d := m.vm.GPU()
	if d == nil {
		return nil, ErrNoDisplay
	}
	return d.Screenshot()
}

// Screenshot returns the running machine's screen as PNG bytes.
func (m *NamedMachine) Screenshot(ctx context.Context) ([]byte, error) {
	png, _, err := m.Screen(ctx, 0)
	return png, err
}

// Display describes the running machine's display: size, frame, cursor.
func (m *NamedMachine) Display(ctx context.Context) (machine.DisplayInfo, error) {
	if err := m.mustHaveScreen(); err != nil {
		return machine.DisplayInfo{}, err
	}
	return m.client().Display(ctx)
}

// Screen returns the running machine's screen as PNG bytes and its frame
// number; with after > 0 it first waits, a bounded time, for a frame
// numbered above after (a viewer's long poll).
func (m *NamedMachine) Screen(ctx context.Context, after uint64) ([]byte, uint64, error) {
	if err := m.mustHaveScreen(); err != nil {
		return nil, 0, err
	}
	return m.client().Screen(ctx, after)
}

// mustHaveScreen refuses a machine without a display, or not running.
func (m *NamedMachine) mustHaveScreen() error {
	if m.spec.GPU == nil {
		return fmt.Errorf("machine %s: %w", m.spec.Name, ErrNoDisplay)
	}
	st, err := m.store.Status(m.spec.Name)
	if err != nil {
		return err
	}
	if st.State != machine.Running && st.State != machine.Paused {
		return fmt.Errorf("machine %s is %s; only a running machine has a screen", m.spec.Name, st.State)
	}
	return nil
}
