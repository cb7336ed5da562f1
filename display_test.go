package smol

import (
	"strings"
	"testing"

	"github.com/smolvm/smol/devices/gpu"
	"github.com/smolvm/smol/machine"
	"github.com/smolvm/smol/virtio/input"
)

func TestDisplayInputChecksEvents(t *testing.T) {
	d, err := gpu.New(gpu.Config{Width: 640, Height: 480})
	if err != nil {
		t.Fatal(err)
	}
	s := &screen{Device: d, keyboard: input.New(input.Keyboard), tablet: input.New(input.Tablet)}
	good := []machine.InputEvent{
		{Kind: "key", Code: "KeyA", Down: true}, {Kind: "key", Code: "KeyA"},
		{Kind: "move", X: 0, Y: 0}, {Kind: "move", X: 639, Y: 479},
		{Kind: "button", Button: 2, Down: true}, {Kind: "wheel", Delta: -3},
	}
	if err := s.Input(good); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ev   machine.InputEvent
		want string
	}{
		{machine.InputEvent{Kind: "key", Code: "Hyper"}, "unknown key"},
		{machine.InputEvent{Kind: "button", Button: 3}, "button 3"},
		{machine.InputEvent{Kind: "move", X: 640, Y: 0}, "outside"},
		{machine.InputEvent{Kind: "move", X: -1, Y: 0}, "outside"},
		{machine.InputEvent{Kind: "wheel"}, "wheel delta 0"},
		{machine.InputEvent{Kind: "wheel", Delta: 1000}, "wheel delta"},
		{machine.InputEvent{Kind: "touch"}, "unknown kind"},
	} {
		if err := s.Input([]machine.InputEvent{c.ev}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.ev, err, c.want)
		}
	}
}

func TestAxisSpansTheDisplay(t *testing.T) {
	if axis(0, 640) != 0 || axis(639, 640) != input.AbsMax || axis(320, 641) != input.AbsMax/2 {
		t.Fatalf("axis: %d %d %d", axis(0, 640), axis(639, 640), axis(320, 641))
	}
}
