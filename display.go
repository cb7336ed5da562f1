package smol

import (
	"context"
	"fmt"
	"image"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/virtio/input"
)

// ErrNoDisplay says a machine has no display: it was started without a
// GPU (Config.GPU, MachineConfig.GPU, --gpu).
var ErrNoDisplay = machine.ErrNoDisplay

// screen is a machine's display with its keyboard and tablet, as the
// control API serves it (machine.Display).
type screen struct {
	*gpu.Device
	keyboard, tablet *input.Device
}

// screen returns the VM's display, nil without one.
func (m *Machine) screen() *screen {
	d := m.vm.GPU()
	if d == nil {
		return nil
	}
	return &screen{Device: d, keyboard: m.vm.Keyboard(), tablet: m.vm.Tablet()}
}

// Input implements machine.Display: each event becomes the evdev events
// of the device it belongs to, a batch per event. A bad event stops the
// batch with an error; those before it were sent.
func (s *screen) Input(events []machine.InputEvent) error {
	width, height := s.Size()
	for i, e := range events {
		var err error
		switch e.Kind {
		case "key":
			code, ok := input.KeyCode(e.Code)
			if !ok {
				return fmt.Errorf("input event %d: unknown key %q", i, e.Code)
			}
			err = s.keyboard.Send(input.Event{Type: input.EvKey, Code: code, Value: boolValue(e.Down)})
		case "button":
			buttons := []uint16{input.BtnLeft, input.BtnMiddle, input.BtnRight}
			if e.Button < 0 || e.Button >= len(buttons) {
				return fmt.Errorf("input event %d: button %d (want 0-2)", i, e.Button)
			}
			err = s.tablet.Send(input.Event{Type: input.EvKey, Code: buttons[e.Button], Value: boolValue(e.Down)})
		case "move":
			if e.X < 0 || e.Y < 0 || e.X >= int(width) || e.Y >= int(height) {
				return fmt.Errorf("input event %d: position %d,%d outside the %dx%d display", i, e.X, e.Y, width, height)
			}
			err = s.tablet.Send(
				input.Event{Type: input.EvAbs, Code: input.AbsX, Value: axis(e.X, width)},
				input.Event{Type: input.EvAbs, Code: input.AbsY, Value: axis(e.Y, height)})
		case "wheel":
			if e.Delta == 0 || e.Delta < -100 || e.Delta > 100 {
				return fmt.Errorf("input event %d: wheel delta %d (want -100 to 100, not 0)", i, e.Delta)
			}
			err = s.tablet.Send(input.Event{Type: input.EvRel, Code: input.RelWheel, Value: int32(e.Delta)})
		default:
			return fmt.Errorf("input event %d: unknown kind %q (want key, button, move or wheel)", i, e.Kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func boolValue(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// axis scales a pixel position to the tablet's 0-AbsMax range, so that the
// last pixel is the top of the range.
func axis(p int, size uint32) int32 {
	if size <= 1 {
		return 0
	}
	return int32(int64(p) * input.AbsMax / int64(size-1))
}

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

// Input sends keyboard and pointer events to the running machine's
// display (see machine.InputEvent).
func (m *NamedMachine) Input(ctx context.Context, events []machine.InputEvent) error {
	if err := m.mustHaveScreen(); err != nil {
		return err
	}
	return m.client().Input(ctx, events)
}
