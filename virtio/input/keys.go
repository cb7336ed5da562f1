package input

import "strconv"

// KeyCode returns the Linux key code of a key named as web browsers name
// physical keys (KeyboardEvent.code: "KeyA", "Enter", "ArrowLeft"), the
// names the live view sends. Codes name positions on a US layout; the
// guest's keymap decides what character a position types.
func KeyCode(name string) (uint16, bool) {
	c, ok := domKeyCodes[name]
	return c, ok
}

var domKeyCodes = func() map[string]uint16 {
	m := map[string]uint16{
		"Escape": 1, "Minus": 12, "Equal": 13, "Backspace": 14, "Tab": 15,
		"BracketLeft": 26, "BracketRight": 27, "Enter": 28, "ControlLeft": 29,
		"Semicolon": 39, "Quote": 40, "Backquote": 41, "ShiftLeft": 42, "Backslash": 43,
		"Comma": 51, "Period": 52, "Slash": 53, "ShiftRight": 54, "NumpadMultiply": 55,
		"AltLeft": 56, "Space": 57, "CapsLock": 58, "NumLock": 69, "ScrollLock": 70,
		"Numpad7": 71, "Numpad8": 72, "Numpad9": 73, "NumpadSubtract": 74,
		"Numpad4": 75, "Numpad5": 76, "Numpad6": 77, "NumpadAdd": 78,
		"Numpad1": 79, "Numpad2": 80, "Numpad3": 81, "Numpad0": 82, "NumpadDecimal": 83,
		"IntlBackslash": 86, "F11": 87, "F12": 88, "NumpadEnter": 96, "ControlRight": 97,
		"NumpadDivide": 98, "PrintScreen": 99, "AltRight": 100, "Home": 102, "ArrowUp": 103,
		"PageUp": 104, "ArrowLeft": 105, "ArrowRight": 106, "End": 107, "ArrowDown": 108,
		"PageDown": 109, "Insert": 110, "Delete": 111, "Pause": 119,
		"MetaLeft": 125, "MetaRight": 126, "ContextMenu": 127,
	}
	for i, r := range "1234567890" {
		m["Digit"+string(r)] = uint16(2 + i)
	}
	for _, row := range []struct {
		first uint16
		keys  string
	}{{16, "QWERTYUIOP"}, {30, "ASDFGHJKL"}, {44, "ZXCVBNM"}} {
		for i, r := range row.keys {
			m["Key"+string(r)] = row.first + uint16(i)
		}
	}
	for i := 1; i <= 10; i++ {
		m["F"+strconv.Itoa(i)] = uint16(58 + i)
	}
	return m
}()
