// Package termsafe escapes text that came from a guest before smol prints
// it in its own messages, so that a hostile guest cannot drive the user's
// terminal (clear it, move the cursor, retitle the window, fake a prompt or
// a smol message) through an agent error or a console tail. A command's own
// stdout and stderr are not smol's messages and are passed through as they
// are.
//
// Printable UTF-8 (strconv.IsPrint) and tabs are kept; everything else is
// written the way a Go string literal would write it: ESC as \x1b, a lone
// carriage return as \r, C1 controls and invisible format characters (such
// as bidirectional overrides) as \u202e, bytes that are not UTF-8 as \xff.
// A backslash becomes \\, so escaped text cannot pass for the escape of
// something else.
package termsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text escapes multi-line guest text, such as the end of a console: line
// breaks stay line breaks ("\r\n", what a serial console writes, counts as
// one), every other control is escaped.
func Text(s string) string { return escape(s, true) }

// Line escapes guest text meant to be one line of a message, such as the
// agent's reason a command could not start: line breaks are escaped too, so
// the text cannot start a line of its own that looks like smol's.
func Line(s string) string { return escape(s, false) }

func escape(s string, multiline bool) string {
	if safe(s, multiline) {
		return s // the common case: no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case multiline && r == '\n':
			b.WriteByte('\n')
		case multiline && r == '\r' && i+1 < len(s) && s[i+1] == '\n':
			// The CR of a CRLF: the newline that follows says it all.
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\t' || strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			writeEscaped(&b, r)
		}
		i += size
	}
	return b.String()
}

// safe reports whether s needs no escaping.
func safe(s string, multiline bool) bool {
	for _, r := range s {
		switch {
		case r == '\\' || r == utf8.RuneError:
			return false
		case r == '\t', multiline && r == '\n':
		case !strconv.IsPrint(r):
			return false
		}
	}
	return true
}

// writeEscaped writes the Go escape of a rune that is not printable.
func writeEscaped(b *strings.Builder, r rune) {
	switch r {
	case '\a':
		b.WriteString(`\a`)
	case '\b':
		b.WriteString(`\b`)
	case '\f':
		b.WriteString(`\f`)
	case '\n':
		b.WriteString(`\n`)
	case '\r':
		b.WriteString(`\r`)
	case '\v':
		b.WriteString(`\v`)
	default:
		switch {
		case r < utf8.RuneSelf:
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(r)))
		case r <= 0xffff:
			b.WriteString(`\u`)
			b.WriteString(pad(strconv.FormatUint(uint64(r), 16), 4))
		default:
			b.WriteString(`\U`)
			b.WriteString(pad(strconv.FormatUint(uint64(r), 16), 8))
		}
	}
}

func hex2(c byte) string { return pad(strconv.FormatUint(uint64(c), 16), 2) }

func pad(s string, n int) string {
	if len(s) < n {
		return strings.Repeat("0", n-len(s)) + s
	}
	return s
}
