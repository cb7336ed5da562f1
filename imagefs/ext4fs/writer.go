package ext4fs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Geometry shared by every image.
const (
	BlockSize      = 4096
	inodeSize      = 256
	extraIsize     = 32 // bytes of the inode past the original 128: nanosecond times, crtime
	blocksPerGroup = BlockSize * 8
	inodesPerBlock = BlockSize / inodeSize
	descSize       = 32
	rootIno        = 2
	firstIno       = 11 // the first inode not reserved; lost+found by custom
	maxExtentLen   = 32768
	maxBlocks      = 1<<32 - 1 // without the 64bit feature
)

// Options shape an image.
type Options struct {
	// MaxBytes bounds the file data the image will hold; it sizes the
	// group-descriptor table reserved at the start. Finish fails if the
	// image outgrows it.
	MaxBytes int64
	Label    string   // volume label, at most 16 bytes
	UUID     [16]byte // volume UUID (and the seed of its directory hash)
	// Spare is the free space to leave for a writable copy to grow, beyond
	// a third of the content.
	Spare int64
	// Inodes is the least number of free inodes to leave (a writable disk
	// wants about one per 16 KiB); the default leaves half the used count
	// again plus 16384.
	Inodes int64
	Now    time.Time // creation time recorded in the superblock
	// JournalBlocks gives the filesystem a jbd2 journal of that many
	// blocks (1024 to 32768; 0: none), for a disk that is written to.
	JournalBlocks uint32
}

// Writer builds one image in a file it does not own: the caller creates
// the file (private to itself), and fsyncs and closes it after Finish.
type Writer struct {
	f         *os.File
	opt       Options
	gdtBlocks uint32 // blocks reserved after the superblock for descriptors
	next      uint32 // next free block; data and then metadata are appended
	root      *Node
	buf       []byte
	finished  bool
	journal   *Node // inode 8, when Options.JournalBlocks asks for one
}

// New starts an image in f, which must be empty.
func New(f *os.File, opt Options) (*Writer, error) {
	if len(opt.Label) > 16 {
		return nil, fmt.Errorf("ext4 label %q is longer than 16 bytes", opt.Label)
	}
	if opt.MaxBytes <= 0 {
		return nil, errors.New("ext4fs: MaxBytes must be positive")
	}
	if err := checkJournal(opt.JournalBlocks); err != nil {
		return nil, err
	}
	// The largest image: the data, a third more of slack, the spare, and
	// metadata (bounded generously by 1/8 of that, plus 64 MiB).
	maxTotal := (opt.MaxBytes+opt.MaxBytes/3+opt.Spare)*9/8 + 64<<20
	groups := (maxTotal/BlockSize + blocksPerGroup - 1) / blocksPerGroup
	gdt := (groups*descSize + BlockSize - 1) / BlockSize
	if maxTotal/BlockSize > maxBlocks {
		return nil, fmt.Errorf("ext4fs: images over %d GiB need the 64bit feature, which this writer does not make", maxBlocks*BlockSize>>30)
	}
	w := &Writer{f: f, opt: opt, gdtBlocks: uint32(gdt), buf: make([]byte, 1<<20)}
	w.next = 1 + w.gdtBlocks
	w.root = NewDir(0o755, 0, 0, opt.Now)
	return w, nil
}

// Root is the tree's root directory.
func (w *Writer) Root() *Node { return w.root }

// WriteData streams a regular file's contents (everything r yields) into
// the image and attaches it to n, replacing nothing: a node gets its data
// once. All-zero blocks are not written, so they cost the host nothing.
func (w *Writer) WriteData(n *Node, r io.Reader) (int64, error) {
	if n.Type() != TypeReg || n.data != nil || n.size != 0 {
		return 0, errors.New("ext4fs: WriteData needs a fresh regular file")
	}
	start := w.next
	var written int64
	for {
		m, err := io.ReadFull(r, w.buf)
		if m > 0 {
			blocks := uint32((m + BlockSize - 1) / BlockSize)
			if uint64(w.next)+uint64(blocks) > maxBlocks {
				return written, errors.New("ext4fs: image larger than 16 TiB")
			}
			if werr := w.writeSkippingZeros(w.buf[:m], int64(w.next)*BlockSize); werr != nil {
				return written, werr
			}
			w.next += blocks
			written += int64(m)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return written, err
		}
	}
	n.size = written
	for b := start; b < w.next; {
		c := min(w.next-b, maxExtentLen)
		n.data = append(n.data, extent{b, c})
		b += c
	}
	return written, nil
}

var zeroBlock [BlockSize]byte

// writeSkippingZeros writes p at off, leaving whole zero blocks as holes.
func (w *Writer) writeSkippingZeros(p []byte, off int64) error {
	for i := 0; i < len(p); {
		if end := min(i+BlockSize, len(p)); bytes.Equal(p[i:end], zeroBlock[:end-i]) {
			i = end
			continue
		}
		j := i
		for j < len(p) {
			end := min(j+BlockSize, len(p))
			if bytes.Equal(p[j:end], zeroBlock[:end-j]) {
				break
			}
			j = end
		}
		if _, err := w.f.WriteAt(p[i:j], off+int64(i)); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// DataBytes is the space the written file data takes, in whole blocks.
func (w *Writer) DataBytes() int64 { return int64(w.next-1-w.gdtBlocks) * BlockSize }
