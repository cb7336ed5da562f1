package input

import "encoding/binary"

// Event types and codes (include/uapi/linux/input-event-codes.h).
const (
	EvSyn = 0x00
	EvKey = 0x01
	EvRel = 0x02
	EvAbs = 0x03
	EvRep = 0x14

	SynReport = 0

	BtnLeft   = 0x110
	BtnRight  = 0x111
	BtnMiddle = 0x112

	AbsX     = 0x00
	AbsY     = 0x01
	RelWheel = 0x08

	// MaxKeyboardCode is the last key code the keyboard offers
	// (KEY_MICMUTE): every key of a PC keyboard and the media keys.
	MaxKeyboardCode = 248
)

// AbsMax is the top of the tablet's axes: a position is a fraction of the
// display, 0 to AbsMax, whatever its size.
const AbsMax = 0x7fff

// Configuration selectors (section 5.8.2).
const (
	cfgUnset    = 0x00
	cfgIDName   = 0x01
	cfgIDSerial = 0x02
	cfgIDDevIDs = 0x03
	cfgPropBits = 0x10
	cfgEvBits   = 0x11
	cfgAbsInfo  = 0x12
)

// Configuration space layout: select, subsel, size, 5 reserved bytes,
// then a 128-byte union.
const (
	cfgSelect   = 0
	cfgSubsel   = 1
	cfgSize     = 2
	cfgUnion    = 8
	cfgUnionLen = 128
	cfgLen      = cfgUnion + cfgUnionLen
)

// busVirtual is BUS_VIRTUAL, the bus type in the device's IDs.
const busVirtual = 0x06

// Kind says what a device is.
type Kind int

const (
	Keyboard Kind = iota
	Tablet
)

// capabilities is what one kind of device emits: per event type, the
// codes; per absolute axis, its range.
type capabilities struct {
	name    string
	product uint16
	codes   map[uint8][]uint16
	absMax  map[uint16]uint32
}

func capabilitiesOf(k Kind) capabilities {
	if k == Tablet {
		return capabilities{
			name:    "smol tablet",
			product: 2,
			codes: map[uint8][]uint16{
				EvKey: {BtnLeft, BtnRight, BtnMiddle},
				EvAbs: {AbsX, AbsY},
				EvRel: {RelWheel},
			},
			absMax: map[uint16]uint32{AbsX: AbsMax, AbsY: AbsMax},
		}
	}
	keys := make([]uint16, 0, MaxKeyboardCode)
	for c := uint16(1); c <= MaxKeyboardCode; c++ {
		keys = append(keys, c)
	}
	return capabilities{name: "smol keyboard", product: 1, codes: map[uint8][]uint16{EvKey: keys, EvRep: nil}}
}

// answer returns the union's bytes for a selector and subselector; an
// empty answer (size 0) says "nothing there".
func (c capabilities) answer(sel, subsel uint8) []byte {
	switch sel {
	case cfgIDName:
		return []byte(c.name)
	case cfgIDSerial:
		return []byte("0")
	case cfgIDDevIDs:
		b := make([]byte, 8)
		binary.LittleEndian.PutUint16(b[0:], busVirtual)
		binary.LittleEndian.PutUint16(b[4:], c.product)
		binary.LittleEndian.PutUint16(b[6:], 1) // version
		return b
	case cfgPropBits:
		return nil
	case cfgEvBits:
		codes, ok := c.codes[subsel]
		if !ok {
			return nil
		}
		if len(codes) == 0 { // a type with no codes (EV_REP): one zero byte marks it present
			return []byte{0}
		}
		return bitmap(codes)
	case cfgAbsInfo:
		max, ok := c.absMax[uint16(subsel)]
		if !ok {
			return nil
		}
		b := make([]byte, 20) // min, max, fuzz, flat, res
		binary.LittleEndian.PutUint32(b[4:], max)
		return b
	}
	return nil
}

// bitmap sets bit code of a little-endian bitmap for every code, trimmed
// after its last non-zero byte.
func bitmap(codes []uint16) []byte {
	b := make([]byte, cfgUnionLen)
	last := 0
	for _, c := range codes {
		if int(c/8) < len(b) {
			b[c/8] |= 1 << (c % 8)
			last = max(last, int(c/8)+1)
		}
	}
	return b[:last]
}
