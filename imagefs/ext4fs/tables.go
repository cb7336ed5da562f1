package ext4fs

import (
	"encoding/binary"
	"fmt"
	"time"
)

// layout is where the group metadata goes: every group's block bitmap,
// then every inode bitmap, then every inode table, right after the
// content (flex_bg allows them anywhere); free space follows.
type layout struct {
	groups      uint32
	ipg         uint32 // inodes per group
	itb         uint32 // inode-table blocks per group
	metaStart   uint32
	blocks      uint32 // total
	descBlocks  uint32
	usedInodes  uint32 // highest inode number in use
	totalInodes uint32
}

func (l layout) blockBitmap(g uint32) uint32 { return l.metaStart + g }
func (l layout) inodeBitmap(g uint32) uint32 { return l.metaStart + l.groups + g }
func (l layout) inodeTable(g uint32) uint32  { return l.metaStart + 2*l.groups + g*l.itb }

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// geometry sizes the filesystem: a third of the content again plus the
// caller's spare as free space, and half the inodes in use again plus
// 16384 free, so that a writable copy can grow.
func (w *Writer) geometry(usedInodes int, contentStart uint32) (layout, error) {
	contentEnd := uint64(w.next)
	slack := ceilDiv(uint64(contentEnd)/3*BlockSize+uint64(w.opt.Spare), BlockSize)
	want := uint64(usedInodes) + max(uint64(usedInodes)/2+16384, uint64(max(w.opt.Inodes, 0)))
	groups := uint64(1)
	var l layout
	for {
		ipg := ceilDiv(ceilDiv(want, groups), inodesPerBlock) * inodesPerBlock
		if ipg > blocksPerGroup {
			groups = ceilDiv(want, blocksPerGroup)
			continue
		}
		itb := ipg / inodesPerBlock
		total := contentEnd + groups*(2+itb) + slack
		if need := ceilDiv(total, blocksPerGroup); need > groups {
			groups = need
			continue
		}
		// More groups than the blocks need (many inodes): the last group
		// gets a few blocks of its own.
		total = max(total, (groups-1)*blocksPerGroup+64)
		if total > maxBlocks {
			return l, fmt.Errorf("ext4fs: image of %d blocks is too large", total)
		}
		l = layout{groups: uint32(groups), ipg: uint32(ipg), itb: uint32(itb), metaStart: uint32(contentEnd),
			blocks: uint32(total), usedInodes: uint32(usedInodes), totalInodes: uint32(groups * ipg)}
		break
	}
	l.descBlocks = uint32(ceilDiv(uint64(l.groups)*descSize, BlockSize))
	if l.descBlocks > w.gdtBlocks {
		return l, fmt.Errorf("ext4fs: the image outgrew the %d bytes it was created for", w.opt.MaxBytes)
	}
	_ = contentStart
	return l, nil
}

// bitmap is one bit per block (or inode), a block of bits per group.
type bitmap []byte

func (b bitmap) set(i uint32)        { b[i/8] |= 1 << (i % 8) }
func (b bitmap) isSet(i uint32) bool { return b[i/8]&(1<<(i%8)) != 0 }

// setRange sets bits from to to-1: bit by bit up to a byte boundary,
// then whole bytes (a group's unused inode bits and a big file's blocks
// are tens of thousands of bits).
func (b bitmap) setRange(from, to uint32) {
	for ; from < to && from%8 != 0; from++ {
		b.set(from)
	}
	for ; to-from >= 8 && from < to; from += 8 {
		b[from/8] = 0xFF
	}
	for ; from < to; from++ {
		b.set(from)
	}
}

// writeTables writes inode tables, bitmaps, descriptors and the
// superblock, and punches out the blocks nothing uses. It returns the
// number of blocks in use.
func (w *Writer) writeTables(nodes []*Node, l layout) (int64, error) {
	blocks := make(bitmap, uint64(l.groups)*BlockSize)
	blocks.setRange(0, 1+l.descBlocks)
	blocks.setRange(l.metaStart, l.metaStart+l.groups*(2+l.itb))
	for _, n := range nodes {
		if n == nil {
			continue
		}
		for _, r := range n.runs() {
			blocks.setRange(r.start, r.start+r.count)
		}
		for _, b := range n.leaves {
			blocks.set(b)
		}
		if n.xblock != 0 {
			blocks.set(n.xblock)
		}
	}
	// Blocks of replaced files: free, and handed back to the host.
	for b := 1 + w.gdtBlocks; b < l.metaStart; {
		if blocks.isSet(b) {
			b++
			continue
		}
		e := b
		for e < l.metaStart && !blocks.isSet(e) {
			e++
		}
		w.punch(b, e)
		b = e
	}
	// Past the end of the filesystem, the last group's bits are set.
	blocks.setRange(l.blocks, l.groups*blocksPerGroup)

	desc := make([]byte, l.descBlocks*BlockSize)
	var freeBlocks, freeInodes uint64
	// Only the used inodes (numbered from 1 up) are encoded, so the table
	// holds at most those of one group, and what a group wrote is all a
	// later one must clear: a spare-sized filesystem (a machine's 20 GiB
	// writable layer: 160 groups of 8192 inodes) would otherwise clear
	// 2 MiB per group for the few inodes it has.
	table := make([]byte, min(l.ipg, l.usedInodes)*inodeSize)
	var dirty uint32 // inodes of table the previous group wrote
	ibits := make(bitmap, BlockSize)
	for g := uint32(0); g < l.groups; g++ {
		first := g*l.ipg + 1 // inode numbers of this group: first … first+ipg-1
		clear(table[:dirty*inodeSize])
		clear(ibits)
		var used, dirs, top uint32
		for i := uint32(0); i < l.ipg; i++ {
			ino := first + i
			if ino > l.usedInodes {
				break
			}
			ibits.set(i)
			used++
			if n := nodes[ino]; n != nil {
				if err := w.encodeInode(table[i*inodeSize:(i+1)*inodeSize], n); err != nil {
					return 0, err
				}
				if n.IsDir() {
					dirs++
				}
			}
			top = i + 1
		}
		dirty = top
		ibits.setRange(l.ipg, BlockSize*8)
		if top > 0 {
			if _, err := w.f.WriteAt(table[:top*inodeSize], int64(l.inodeTable(g))*BlockSize); err != nil {
				return 0, err
			}
		}
		if _, err := w.f.WriteAt(ibits, int64(l.inodeBitmap(g))*BlockSize); err != nil {
			return 0, err
		}
		bb := blocks[g*BlockSize : (g+1)*BlockSize]
		if _, err := w.f.WriteAt(bb, int64(l.blockBitmap(g))*BlockSize); err != nil {
			return 0, err
		}
		var usedBlocks uint32
		for _, x := range bb {
			usedBlocks += uint32(popcount(x))
		}
		fb := blocksPerGroup - usedBlocks
		fi := l.ipg - used
		freeBlocks += uint64(fb)
		freeInodes += uint64(fi)
		d := desc[g*descSize:]
		binary.LittleEndian.PutUint32(d[0x00:], l.blockBitmap(g))
		binary.LittleEndian.PutUint32(d[0x04:], l.inodeBitmap(g))
		binary.LittleEndian.PutUint32(d[0x08:], l.inodeTable(g))
		binary.LittleEndian.PutUint16(d[0x0C:], uint16(fb))
		binary.LittleEndian.PutUint16(d[0x0E:], uint16(fi))
		binary.LittleEndian.PutUint16(d[0x10:], uint16(dirs))
	}
	if _, err := w.f.WriteAt(desc, BlockSize); err != nil {
		return 0, err
	}
	if _, err := w.f.WriteAt(w.superblock(l, freeBlocks, freeInodes), 1024); err != nil {
		return 0, err
	}
	return int64(l.blocks) - int64(freeBlocks), nil
}

func popcount(x byte) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// Feature flags this writer's images carry.
const (
	compatExtAttr      = 0x0008
	compatDirIndex     = 0x0020
	compatSparseSuper2 = 0x0200
	incompatFiletype   = 0x0002
	incompatExtents    = 0x0040
	incompatFlexBG     = 0x0200
	roSparseSuper      = 0x0001
	roLargeFile        = 0x0002
	roDirNlink         = 0x0020
	roExtraIsize       = 0x0040
)

func (w *Writer) superblock(l layout, freeBlocks, freeInodes uint64) []byte {
	b := make([]byte, 1024)
	le := binary.LittleEndian
	now := uint32(w.opt.Now.Unix())
	le.PutUint32(b[0x00:], l.totalInodes)
	le.PutUint32(b[0x04:], l.blocks)
	le.PutUint32(b[0x0C:], uint32(freeBlocks))
	le.PutUint32(b[0x10:], uint32(freeInodes))
	le.PutUint32(b[0x14:], 0) // first data block: 0 with 4 KiB blocks
	le.PutUint32(b[0x18:], 2) // log2(block size) - 10
	le.PutUint32(b[0x1C:], 2)
	le.PutUint32(b[0x20:], blocksPerGroup)
	le.PutUint32(b[0x24:], blocksPerGroup)
	le.PutUint32(b[0x28:], l.ipg)
	le.PutUint32(b[0x30:], now)    // write time
	le.PutUint16(b[0x36:], 0xFFFF) // max mount count: no forced checks
	le.PutUint16(b[0x38:], 0xEF53)
	le.PutUint16(b[0x3A:], 1) // clean
	le.PutUint16(b[0x3C:], 1) // on errors: continue
	le.PutUint32(b[0x40:], now)
	le.PutUint32(b[0x4C:], 1) // dynamic revision
	le.PutUint32(b[0x54:], firstIno)
	le.PutUint16(b[0x58:], inodeSize)
	le.PutUint32(b[0x5C:], compatExtAttr|compatDirIndex|compatSparseSuper2)
	le.PutUint32(b[0x60:], incompatFiletype|incompatExtents|incompatFlexBG)
	le.PutUint32(b[0x64:], roSparseSuper|roLargeFile|roDirNlink|roExtraIsize)
	copy(b[0x68:0x78], w.opt.UUID[:])
	copy(b[0x78:0x88], w.opt.Label)
	for i := 0; i < 4; i++ { // directory hash seed, from the UUID
		le.PutUint32(b[0xEC+4*i:], le.Uint32(w.opt.UUID[4*i:])^0x5a5a5a5a)
	}
	b[0xFC] = 1 // half_md4
	le.PutUint32(b[0x108:], now)
	le.PutUint16(b[0x15C:], extraIsize)
	le.PutUint16(b[0x15E:], extraIsize)
	le.PutUint32(b[0x160:], 1) // signed directory hash, as x86 mke2fs says
	b[0x174] = 4               // 16 groups per flex group
	// s_backup_bgs (0x24C) stay 0: no backup superblocks.
	if w.journal != nil {
		w.putJournal(b, w.journal)
	}
	return b
}

// Inode flags.
const extentsFlag = 0x80000

// encodeInode fills one 256-byte inode.
func (w *Writer) encodeInode(b []byte, n *Node) error {
	le := binary.LittleEndian
	le.PutUint16(b[0x00:], uint16(n.Mode))
	le.PutUint16(b[0x02:], uint16(n.UID))
	le.PutUint16(b[0x78:], uint16(n.UID>>16))
	le.PutUint16(b[0x18:], uint16(n.GID))
	le.PutUint16(b[0x7A:], uint16(n.GID>>16))
	le.PutUint16(b[0x1A:], uint16(n.nlink))
	sec, extra := encodeTime(n.Mtime)
	for _, off := range []int{0x08, 0x0C, 0x10, 0x90} {
		le.PutUint32(b[off:], sec)
	}
	for _, off := range []int{0x84, 0x88, 0x8C, 0x94} {
		le.PutUint32(b[off:], extra)
	}
	le.PutUint16(b[0x80:], extraIsize)

	var size uint64
	var blocks uint64
	iblock := b[0x28:0x64]
	switch n.Type() {
	case TypeReg, TypeDir:
		runs := n.runs()
		for _, r := range runs {
			blocks += uint64(r.count)
		}
		size = uint64(n.size)
		if n.IsDir() {
			size = blocks * BlockSize
		}
		w.putBlockMap(iblock, n, runs)
		le.PutUint32(b[0x20:], extentsFlag)
	case TypeSymlink:
		size = uint64(len(n.Link))
		if n.meta == nil {
			copy(iblock, n.Link)
		} else {
			blocks = 1
			w.putBlockMap(iblock, n, n.meta)
			le.PutUint32(b[0x20:], extentsFlag)
		}
	case TypeChar, TypeBlock:
		if n.Major < 256 && n.Minor < 256 {
			le.PutUint32(iblock[0:], n.Major<<8|n.Minor)
		} else {
			le.PutUint32(iblock[4:], n.Minor&0xff|n.Major<<8|(n.Minor&^0xff)<<12)
		}
	case TypeFifo:
	default:
		return fmt.Errorf("ext4fs: inode %d has file type %#o", n.ino, n.Type())
	}
	blocks += uint64(len(n.leaves))
	if n.xblock != 0 {
		blocks++
		le.PutUint32(b[0x68:], n.xblock)
	}
	sectors := blocks * (BlockSize / 512)
	if sectors >= 1<<48 {
		return fmt.Errorf("ext4fs: inode %d is too large", n.ino)
	}
	le.PutUint32(b[0x04:], uint32(size))
	le.PutUint32(b[0x6C:], uint32(size>>32))
	le.PutUint32(b[0x1C:], uint32(sectors))
	le.PutUint16(b[0x74:], uint16(sectors>>32))
	if n.inInode != nil {
		copy(b[inodeXattrStart:], n.inInode)
	}
	return nil
}

// putBlockMap writes the extent tree root into i_block: the extents
// themselves when there are at most four, else an index of leaf blocks.
func (w *Writer) putBlockMap(iblock []byte, n *Node, runs []extent) {
	if len(n.leaves) == 0 {
		putExtents(iblock, runs, 0, 4)
		return
	}
	putExtentHeader(iblock, len(n.leaves), 4, 1)
	var logical uint32
	for i, leaf := range n.leaves {
		e := iblock[12+12*i:]
		binary.LittleEndian.PutUint32(e[0:], logical)
		binary.LittleEndian.PutUint32(e[4:], leaf)
		for _, r := range runs[i*extentsPerLeaf : min((i+1)*extentsPerLeaf, len(runs))] {
			logical += r.count
		}
	}
}

// Times ext4 can hold: 32 signed bits of seconds extended by two epoch
// bits, with nanoseconds beside them.
var (
	minTime = time.Unix(-1<<31, 0)
	maxTime = time.Unix(1<<31-1+3<<32, 999999999)
)

func encodeTime(t time.Time) (sec, extra uint32) {
	if t.IsZero() {
		return 0, 0
	}
	if t.Before(minTime) {
		t = minTime
	}
	if t.After(maxTime) {
		t = maxTime
	}
	s := t.Unix()
	epoch := uint32((s-int64(int32(s)))>>32) & 3
	return uint32(int32(s)), epoch | uint32(t.Nanosecond())<<2
}
