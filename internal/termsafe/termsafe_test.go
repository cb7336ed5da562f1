package termsafe

import (
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{`exec: "foo": executable file not found in $PATH`, `exec: "foo": executable file not found in $PATH`},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		{"a\tb", "a\tb"},
		{"\x1b[2Jgotcha", `\x1b[2Jgotcha`},
		{"\x1b]0;owned\x07", `\x1b]0;owned\a`},
		{"line one\nsmol: fake", `line one\nsmol: fake`},
		{"over\rwrite", `over\rwrite`},
		{"crlf\r\n", `crlf\r\n`},
		{"nul\x00 del\x7f bs\b", `nul\x00 del\x7f bs\b`},
		{"c1 csi \u009b2J", `c1 csi \u009b2J`},
		{"bidi \u202eevil", `bidi \u202eevil`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"tag \U000e0041", `tag \U000e0041`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{"cut \xe2\x9c", `cut \xe2\x9c`},
		{`back\slash`, `back\\slash`},
		{"\ufffd stays", "\ufffd stays"},
	}
	for _, tt := range tests {
		if got := Line(tt.in); got != tt.want {
			t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Linux version 6.1\r\nKernel panic - not syncing\r\n", "Linux version 6.1\nKernel panic - not syncing\n"},
		{"unix\nlines\n", "unix\nlines\n"},
		{"\x1b[2J\x1b[Hboot\n", "\\x1b[2J\\x1b[Hboot\n"},
		{"spoof\rsmol: ok\n", "spoof\\rsmol: ok\n"},
		{"tail ends in CR\r", `tail ends in CR\r`},
		{"\r\r\n", "\\r\n"},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestNoControlsSurvive runs every byte value, alone and in a UTF-8
// sequence, through both functions: what comes out has no control
// character except the newlines Text keeps and tabs.
func TestNoControlsSurvive(t *testing.T) {
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	for r := rune(0x80); r < 0xa0; r++ {
		all.WriteRune(r)
	}
	for name, out := range map[string]string{"Line": Line(all.String()), "Text": Text(all.String())} {
		for _, r := range out {
			if (r < 0x20 && r != '\t' && !(name == "Text" && r == '\n')) || (r >= 0x7f && r < 0xa0) {
				t.Errorf("%s let %U through", name, r)
			}
		}
	}
}
