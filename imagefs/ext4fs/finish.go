package ext4fs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"golang.org/x/sys/unix"
)

// Stats describe a finished image.
type Stats struct {
	Inodes     int   // inodes in use, the reserved ones included
	Size       int64 // bytes of the image file (sparse)
	UsedBlocks int64
}

// Finish lays out directories, inodes, bitmaps and descriptors after the
// data and writes them; the tree must not change afterwards. The file is
// left at its final size; syncing it is the caller's.
func (w *Writer) Finish() (Stats, error) {
	if w.finished {
		return Stats{}, errors.New("ext4fs: Finish called twice")
	}
	w.finished = true
	if w.root.Children["lost+found"] == nil {
		w.root.Children["lost+found"] = NewDir(0o700, 0, 0, w.opt.Now)
	}
	nodes, err := w.number()
	if err != nil {
		return Stats{}, err
	}
	contentStart := w.next
	mw := newMetaWriter(w)
	for _, n := range nodes[rootIno:] {
		if n != nil {
			if err := w.layoutNode(n, mw); err != nil {
				return Stats{}, err
			}
		}
	}
	if w.opt.JournalBlocks != 0 {
		if w.journal, err = w.layoutJournal(mw); err != nil {
			return Stats{}, err
		}
		nodes[journalIno] = w.journal
	}
	if err := mw.flush(); err != nil {
		return Stats{}, err
	}
	g, err := w.geometry(len(nodes)-1, contentStart)
	if err != nil {
		return Stats{}, err
	}
	used, err := w.writeTables(nodes, g)
	if err != nil {
		return Stats{}, err
	}
	if err := w.f.Truncate(int64(g.blocks) * BlockSize); err != nil {
		return Stats{}, err
	}
	return Stats{Inodes: len(nodes) - 1, Size: int64(g.blocks) * BlockSize, UsedBlocks: used}, nil
}

// number gives every reachable node its inode number (the root 2,
// lost+found 11, then depth first in name order, so the image is
// reproducible) and its link count. nodes[ino] is the node; nodes[1] and
// the other reserved ones are nil.
func (w *Writer) number() ([]*Node, error) {
	nodes := make([]*Node, firstIno+1, 1024)
	w.root.ino = rootIno
	nodes[rootIno] = w.root
	lf := w.root.Children["lost+found"]
	lf.ino = firstIno
	nodes[firstIno] = lf
	var walk func(dir *Node, depth int) error
	walk = func(dir *Node, depth int) error {
		if depth > 4096 {
			return errors.New("ext4fs: directories nested deeper than 4096")
		}
		dir.nlink = 2
		for _, name := range sortedNames(dir) {
			c := dir.Children[name]
			if err := checkName(name); err != nil {
				return err
			}
			if c.IsDir() {
				dir.nlink++
				c.parent = dir.ino
				if c.nlink != 0 {
					return fmt.Errorf("ext4fs: directory %s is linked twice", quoteShort(name))
				}
			} else {
				if c.nlink >= 65000 {
					return fmt.Errorf("ext4fs: %s has more than 65000 links", quoteShort(name))
				}
				c.nlink++
			}
			if c.ino == 0 {
				if len(nodes) > maxInodes {
					return fmt.Errorf("ext4fs: more than %d files", maxInodes)
				}
				c.ino = uint32(len(nodes))
				nodes = append(nodes, c)
			}
			if c.IsDir() {
				if err := walk(c, depth+1); err != nil {
					return err
				}
			}
		}
		if dir.nlink > 65000 {
			dir.nlink = 1 // dir_nlink: "many"
		}
		return nil
	}
	if err := walk(w.root, 0); err != nil {
		return nil, err
	}
	return nodes, nil
}

// maxInodes keeps inode numbers and group counts far from overflow.
const maxInodes = 1 << 30

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		return fmt.Errorf("ext4fs: bad file name %s", quoteShort(name))
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return fmt.Errorf("ext4fs: bad file name %s", quoteShort(name))
		}
	}
	return nil
}

func sortedNames(dir *Node) []string {
	names := make([]string, 0, len(dir.Children))
	for k := range dir.Children {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// layoutNode writes a node's directory blocks, long symlink, attribute
// block and extent leaves after the data.
func (w *Writer) layoutNode(n *Node, mw *metaWriter) error {
	switch n.Type() {
	case TypeDir:
		b := encodeDir(n)
		start, err := mw.write(b)
		if err != nil {
			return err
		}
		n.meta = []extent{{start, uint32(len(b) / BlockSize)}}
	case TypeSymlink:
		if len(n.Link) == 0 || len(n.Link) >= BlockSize {
			return fmt.Errorf("ext4fs: symlink target of %d bytes", len(n.Link))
		}
		if len(n.Link) >= 60 {
			b := make([]byte, BlockSize)
			copy(b, n.Link)
			start, err := mw.write(b)
			if err != nil {
				return err
			}
			n.meta = []extent{{start, 1}}
		}
	}
	if len(n.Xattrs) > 0 {
		es, err := encodeXattrs(n.Xattrs)
		if err != nil {
			return err
		}
		if fitsInInode(es) {
			area := make([]byte, inodeSize-inodeXattrStart)
			binary.LittleEndian.PutUint32(area, xattrMagic)
			putXattrs(area[4:], 0, es, false)
			n.inInode = area
		} else {
			if n.xblock, err = mw.write(xattrBlock(es)); err != nil {
				return err
			}
		}
	}
	runs := n.runs()
	if len(runs) > 4 {
		leaves := (len(runs) + extentsPerLeaf - 1) / extentsPerLeaf
		if leaves > 4 {
			return fmt.Errorf("ext4fs: a file of %d bytes is too large for this writer", n.size)
		}
		var logical uint32
		for i := 0; i < leaves; i++ {
			part := runs[i*extentsPerLeaf : min((i+1)*extentsPerLeaf, len(runs))]
			b := make([]byte, BlockSize)
			putExtents(b, part, logical, extentsPerLeaf)
			for _, r := range part {
				logical += r.count
			}
			start, err := mw.write(b)
			if err != nil {
				return err
			}
			n.leaves = append(n.leaves, start)
		}
	}
	return nil
}

// runs is the data (regular files) or metadata (directories, long
// symlinks) blocks of a node, in logical order.
func (n *Node) runs() []extent {
	if n.Type() == TypeReg {
		return n.data
	}
	return n.meta
}

const extentsPerLeaf = (BlockSize - 12) / 12

// putExtents writes an extent header and leaf entries.
func putExtents(b []byte, runs []extent, logical uint32, max int) {
	putExtentHeader(b, len(runs), max, 0)
	for i, r := range runs {
		e := b[12+12*i:]
		binary.LittleEndian.PutUint32(e[0:], logical)
		binary.LittleEndian.PutUint16(e[4:], uint16(r.count))
		binary.LittleEndian.PutUint16(e[6:], 0)
		binary.LittleEndian.PutUint32(e[8:], r.start)
		logical += r.count
	}
}

func putExtentHeader(b []byte, entries, max, depth int) {
	binary.LittleEndian.PutUint16(b[0:], 0xF30A)
	binary.LittleEndian.PutUint16(b[2:], uint16(entries))
	binary.LittleEndian.PutUint16(b[4:], uint16(max))
	binary.LittleEndian.PutUint16(b[6:], uint16(depth))
}

// Directory entry file types.
func direntType(n *Node) uint8 {
	switch n.Type() {
	case TypeReg:
		return 1
	case TypeDir:
		return 2
	case TypeChar:
		return 3
	case TypeBlock:
		return 4
	case TypeFifo:
		return 5
	case TypeSymlink:
		return 7
	}
	return 0
}

// encodeDir packs ".", ".." and the entries in name order into linear
// directory blocks; the last entry of a block stretches to its end.
func encodeDir(dir *Node) []byte {
	parent := dir.parent
	if dir.ino == rootIno {
		parent = rootIno
	}
	var out []byte
	blockStart, last := 0, -1
	add := func(ino uint32, typ uint8, name string) {
		need := (8 + len(name) + 3) &^ 3
		if len(out)+need > blockStart+BlockSize {
			// Close this block: the previous entry takes the rest.
			binary.LittleEndian.PutUint16(out[last+4:], uint16(blockStart+BlockSize-last))
			out = append(out, make([]byte, blockStart+BlockSize-len(out))...)
			blockStart = len(out)
		}
		last = len(out)
		e := make([]byte, need)
		binary.LittleEndian.PutUint32(e[0:], ino)
		binary.LittleEndian.PutUint16(e[4:], uint16(need))
		e[6] = uint8(len(name))
		e[7] = typ
		copy(e[8:], name)
		out = append(out, e...)
	}
	add(dir.ino, 2, ".")
	add(parent, 2, "..")
	for _, name := range sortedNames(dir) {
		c := dir.Children[name]
		add(c.ino, direntType(c), name)
	}
	binary.LittleEndian.PutUint16(out[last+4:], uint16(blockStart+BlockSize-last))
	return append(out, make([]byte, blockStart+BlockSize-len(out))...)
}

// metaWriter appends whole blocks after the data, buffered.
type metaWriter struct {
	w  *Writer
	bw *bufio.Writer
}

func newMetaWriter(w *Writer) *metaWriter {
	return &metaWriter{w: w, bw: bufio.NewWriterSize(io.NewOffsetWriter(w.f, int64(w.next)*BlockSize), 1<<20)}
}

// write appends b (a whole number of blocks) and returns its first block.
func (m *metaWriter) write(b []byte) (uint32, error) {
	n := uint32(len(b) / BlockSize)
	if uint64(m.w.next)+uint64(n) > maxBlocks {
		return 0, errors.New("ext4fs: image larger than 16 TiB")
	}
	start := m.w.next
	if _, err := m.bw.Write(b); err != nil {
		return 0, err
	}
	m.w.next += n
	return start, nil
}

func (m *metaWriter) flush() error { return m.bw.Flush() }

// punch gives the host back the space of blocks no inode uses.
func (w *Writer) punch(from, to uint32) {
	unix.Fallocate(int(w.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(from)*BlockSize, int64(to-from)*BlockSize)
}
