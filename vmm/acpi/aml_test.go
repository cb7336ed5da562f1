package acpi

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// amlDecoder is a test-only reader for the small AML subset the DSDT uses.
// It records every Name() it meets under its full path, e.g. "\_SB_.V000._HID",
// so tests check what the guest's interpreter would see, not our encoder's
// intentions.
type amlDecoder struct {
	b     []byte
	names map[string]any
}

func decodeAML(b []byte) (map[string]any, error) {
	d := &amlDecoder{b: b, names: map[string]any{}}
	if err := d.termList(b, `\`); err != nil {
		return nil, err
	}
	return d.names, nil
}

// pkgLength decodes a PkgLength at b and returns the package's total length
// (which counts the PkgLength bytes) and how many bytes the encoding used.
func pkgLength(b []byte) (total, used int, err error) {
	if len(b) == 0 {
		return 0, 0, fmt.Errorf("missing PkgLength")
	}
	extra := int(b[0] >> 6)
	if len(b) < 1+extra {
		return 0, 0, fmt.Errorf("truncated PkgLength")
	}
	if extra == 0 {
		return int(b[0] & 0x3F), 1, nil
	}
	total = int(b[0] & 0x0F)
	for i := range extra {
		total |= int(b[1+i]) << (4 + 8*i)
	}
	return total, 1 + extra, nil
}

// pkg splits b (starting at a PkgLength) into the package body and the rest.
func pkg(b []byte) (body, rest []byte, err error) {
	total, used, err := pkgLength(b)
	if err != nil {
		return nil, nil, err
	}
	if total < used || total > len(b) {
		return nil, nil, fmt.Errorf("package of %d bytes in %d", total, len(b))
	}
	return b[used:total], b[total:], nil
}

func join(scope, name string) string {
	if scope == `\` {
		return `\` + name
	}
	return scope + "." + name
}

func (d *amlDecoder) termList(b []byte, scope string) error {
	for len(b) > 0 {
		switch {
		case b[0] == amlNameOp:
			if len(b) < 5 {
				return fmt.Errorf("truncated Name")
			}
			v, rest, err := d.dataObject(b[5:])
			if err != nil {
				return fmt.Errorf("Name(%s): %w", b[1:5], err)
			}
			d.names[join(scope, string(b[1:5]))] = v
			b = rest
		case b[0] == amlScopeOp:
			body, rest, err := pkg(b[1:])
			if err != nil {
				return err
			}
			if len(body) < 5 || body[0] != '\\' {
				return fmt.Errorf("scope path % x", body)
			}
			if err := d.termList(body[5:], `\`+string(body[1:5])); err != nil {
				return err
			}
			b = rest
		case len(b) > 1 && b[0] == amlExtOpPrefix && b[1] == amlDeviceOp:
			body, rest, err := pkg(b[2:])
			if err != nil {
				return err
			}
			if len(body) < 4 {
				return fmt.Errorf("device name")
			}
			path := join(scope, string(body[:4]))
			d.names[path] = "Device"
			if err := d.termList(body[4:], path); err != nil {
				return err
			}
			b = rest
		default:
			return fmt.Errorf("unexpected AML opcode %#x", b[0])
		}
	}
	return nil
}

// dataObject decodes an integer (uint64), string, buffer ([]byte) or
// package ([]any).
func (d *amlDecoder) dataObject(b []byte) (any, []byte, error) {
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("missing data")
	}
	le := binary.LittleEndian
	need := func(n int) error {
		if len(b) < 1+n {
			return fmt.Errorf("truncated constant")
		}
		return nil
	}
	switch b[0] {
	case amlZeroOp:
		return uint64(0), b[1:], nil
	case amlOneOp:
		return uint64(1), b[1:], nil
	case amlBytePrefix:
		if err := need(1); err != nil {
			return nil, nil, err
		}
		return uint64(b[1]), b[2:], nil
	case amlWordPrefix:
		if err := need(2); err != nil {
			return nil, nil, err
		}
		return uint64(le.Uint16(b[1:])), b[3:], nil
	case amlDWordPrefix:
		if err := need(4); err != nil {
			return nil, nil, err
		}
		return uint64(le.Uint32(b[1:])), b[5:], nil
	case amlStringPrefix:
		for i := 1; i < len(b); i++ {
			if b[i] == 0 {
				return string(b[1:i]), b[i+1:], nil
			}
		}
		return nil, nil, fmt.Errorf("unterminated string")
	case amlBufferOp:
		body, rest, err := pkg(b[1:])
		if err != nil {
			return nil, nil, err
		}
		size, data, err := d.dataObject(body)
		if err != nil {
			return nil, nil, err
		}
		if n, ok := size.(uint64); !ok || n != uint64(len(data)) {
			return nil, nil, fmt.Errorf("buffer size %v for %d bytes", size, len(data))
		}
		return data, rest, nil
	case amlPackageOp:
		body, rest, err := pkg(b[1:])
		if err != nil {
			return nil, nil, err
		}
		if len(body) == 0 {
			return nil, nil, fmt.Errorf("package without NumElements")
		}
		n, elems := int(body[0]), body[1:]
		var vals []any
		for len(elems) > 0 {
			var v any
			if v, elems, err = d.dataObject(elems); err != nil {
				return nil, nil, err
			}
			vals = append(vals, v)
		}
		if len(vals) != n {
			return nil, nil, fmt.Errorf("package says %d elements, has %d", n, len(vals))
		}
		return vals, rest, nil
	}
	return nil, nil, fmt.Errorf("unexpected data opcode %#x", b[0])
}

// resource is one decoded _CRS descriptor.
type resource struct {
	kind       string // "io", "mem32", "irq"
	base, size uint64
	flags      byte
}

func decodeResources(t *testing.T, b []byte) []resource {
	t.Helper()
	le := binary.LittleEndian
	var out []resource
	for len(b) > 0 {
		tag := b[0]
		if tag&0x80 == 0 { // small item
			n := int(tag & 7)
			if len(b) < 1+n {
				t.Fatalf("truncated small resource % x", b)
			}
			body := b[1 : 1+n]
			switch tag >> 3 {
			case 0x08:
				if n != 7 || le.Uint16(body[1:]) != le.Uint16(body[3:]) {
					t.Fatalf("IO descriptor % x is not a fixed range", body)
				}
				out = append(out, resource{kind: "io", base: uint64(le.Uint16(body[1:])), size: uint64(body[6])})
			case 0x0F:
				if len(b) != 2 {
					t.Fatalf("%d bytes after the end tag", len(b)-2)
				}
				return out
			default:
				t.Fatalf("unexpected small resource %#x", tag)
			}
			b = b[1+n:]
			continue
		}
		if len(b) < 3 {
			t.Fatal("truncated large resource")
		}
		n := int(le.Uint16(b[1:]))
		if len(b) < 3+n {
			t.Fatal("truncated large resource body")
		}
		body := b[3 : 3+n]
		switch tag & 0x7F {
		case 0x06:
			out = append(out, resource{kind: "mem32", base: uint64(le.Uint32(body[1:])), size: uint64(le.Uint32(body[5:])), flags: body[0]})
		case 0x09:
			if body[1] != 1 || n != 6 {
				t.Fatalf("interrupt descriptor % x", body)
			}
			out = append(out, resource{kind: "irq", base: uint64(le.Uint32(body[2:])), flags: body[0]})
		default:
			t.Fatalf("unexpected large resource %#x", tag)
		}
		b = b[3+n:]
	}
	t.Fatal("no end tag")
	return nil
}

func TestPkgLengthEncodings(t *testing.T) {
	for _, n := range []int{0, 1, 62, 63, 64, 4000, 4094, 4095, 1 << 20, 1<<28 - 5} {
		enc := amlPkgLength(n)
		total, used, err := pkgLength(enc)
		if err != nil || used != len(enc) || total != n+len(enc) {
			t.Errorf("n=%d: % x decodes to total %d used %d (%v)", n, enc, total, used, err)
		}
	}
}
