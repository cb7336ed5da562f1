package gpu

// edid returns a 128-byte EDID 1.4 base block describing a display of
// width x height pixels at 60 Hz, for GET_EDID. The guest's DRM driver
// takes its modes from it, so its one detailed timing, the preferred mode,
// is the display's size; timings use CVT reduced-blanking figures (160
// pixels of horizontal blanking, 35 lines of vertical), which any size
// smol offers fits into the descriptor's 12-bit fields. The bytes depend
// only on the size: no date or serial, so two machines look the same.
func edid(width, height uint32) []byte {
	b := make([]byte, 128)
	copy(b[0:8], []byte{0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00})
	// Manufacturer "SML": three 5-bit letters (A=1), big-endian.
	id := uint16('S'-'@')<<10 | uint16('M'-'@')<<5 | uint16('L'-'@')
	b[8], b[9] = byte(id>>8), byte(id)
	b[10] = 1            // product code 1
	b[16], b[17] = 0, 36 // no week; made in 2026 (1990+36), fixed
	b[18], b[19] = 1, 4  // EDID 1.4
	b[20] = 0xa0         // digital input, 8 bits per colour
	// Physical size in cm at 96 dots per inch.
	wmm, hmm := width*254/960, height*254/960
	b[21], b[22] = byte(clampCM(wmm)), byte(clampCM(hmm))
	b[23] = 120  // gamma 2.2
	b[24] = 0x06 // RGB 4:4:4, sRGB default, preferred timing is native
	// sRGB chromaticity coordinates.
	copy(b[25:35], []byte{0xee, 0x91, 0xa3, 0x54, 0x4c, 0x99, 0x26, 0x0f, 0x50, 0x54})
	// No established timings (35-37); standard timings unused (38-53).
	for i := 38; i < 54; i++ {
		b[i] = 0x01
	}
	detailedTiming(b[54:72], width, height, wmm, hmm)
	name := b[72:90] // display product name descriptor
	name[3] = 0xfc
	copy(name[5:], "smol\n")
	for i := 5 + len("smol\n"); i < 18; i++ {
		name[i] = ' '
	}
	b[90+3], b[108+3] = 0x10, 0x10 // two dummy descriptors
	// b[126] = 0: no extension blocks.
	sum := byte(0)
	for _, v := range b[:127] {
		sum += v
	}
	b[127] = -sum
	return b
}

func clampCM(mm uint32) uint32 { return min(max((mm+5)/10, 1), 255) }

// detailedTiming writes an 18-byte detailed timing descriptor.
func detailedTiming(d []byte, width, height, wmm, hmm uint32) {
	const (
		hBlank, hFront, hSync = 160, 48, 32
		vBlank, vFront, vSync = 35, 3, 6
	)
	clock := (uint64(width+hBlank)*uint64(height+vBlank)*60 + 9999) / 10000 // 10 kHz units
	d[0], d[1] = byte(clock), byte(clock>>8)
	d[2] = byte(width)
	d[3] = byte(hBlank)
	d[4] = byte(width>>8)<<4 | byte(hBlank>>8)
	d[5] = byte(height)
	d[6] = byte(vBlank)
	d[7] = byte(height>>8)<<4 | byte(vBlank>>8)
	d[8] = byte(hFront)
	d[9] = byte(hSync)
	d[10] = byte(vFront&0xf)<<4 | byte(vSync&0xf)
	d[11] = byte(hFront>>8)<<6 | byte(hSync>>8)<<4 | byte(vFront>>4)<<2 | byte(vSync>>4)
	d[12] = byte(wmm)
	d[13] = byte(hmm)
	d[14] = byte(wmm>>8)<<4 | byte(hmm>>8)
	d[17] = 0x1a // digital separate sync, hsync positive, vsync negative
}
