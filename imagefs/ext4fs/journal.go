package ext4fs

import (
	"encoding/binary"
	"fmt"
)

// A writable disk (a machine's persistent layer) gets a journal, so that
// a guest killed mid-write (its VMM stopped hard after a shutdown timeout,
// or SIGKILLed) leaves a filesystem the next mount replays instead of one
// that needs fsck. The journal is inode 8, one contiguous extent, empty
// and clean: only its superblock is written, the rest stays a hole until
// the guest's kernel uses it.

const (
	journalIno         = 8
	compatHasJournal   = 0x0004
	maxJournalBlocks   = maxExtentLen // one extent
	minJournalBlocks   = 1024         // jbd2's own minimum
	jbd2Magic          = 0xC03B3998
	jbd2SuperblockV2   = 4
	jnlBackupBlocks    = 1 // s_jnl_backup_type: s_jnl_blocks holds the inode's i_block
	superJournalInum   = 0xE0
	superJnlBackupType = 0xFD
	superJnlBlocks     = 0x10C
)

func checkJournal(blocks uint32) error {
	if blocks != 0 && (blocks < minJournalBlocks || blocks > maxJournalBlocks) {
		return fmt.Errorf("ext4fs: a journal of %d blocks (want %d to %d)", blocks, minJournalBlocks, maxJournalBlocks)
	}
	return nil
}

// journalSuperblock is the first block of an empty, clean jbd2 journal of
// blocks blocks (big-endian, as jbd2 is).
func journalSuperblock(blocks uint32) []byte {
	b := make([]byte, BlockSize)
	be := binary.BigEndian
	be.PutUint32(b[0x00:], jbd2Magic)
	be.PutUint32(b[0x04:], jbd2SuperblockV2)
	be.PutUint32(b[0x0C:], BlockSize) // s_blocksize
	be.PutUint32(b[0x10:], blocks)    // s_maxlen
	be.PutUint32(b[0x14:], 1)         // s_first: the first log block
	be.PutUint32(b[0x18:], 1)         // s_sequence of the first transaction
	// s_start 0: nothing to replay. No features; one user, the
	// filesystem itself (an internal journal names no UUID).
	be.PutUint32(b[0x40:], 1) // s_nr_users
	return b
}

// layoutJournal appends the journal after everything else: its superblock
// block is written, the other blocks are left as a hole.
func (w *Writer) layoutJournal(mw *metaWriter) (*Node, error) {
	blocks := w.opt.JournalBlocks
	start, err := mw.write(journalSuperblock(blocks))
	if err != nil {
		return nil, err
	}
	if uint64(w.next)+uint64(blocks-1) > maxBlocks {
		return nil, fmt.Errorf("ext4fs: image larger than 16 TiB")
	}
	w.next += blocks - 1
	j := &Node{Mode: TypeReg | 0o600, Mtime: w.opt.Now, size: int64(blocks) * BlockSize, data: []extent{{start, blocks}}}
	j.ino, j.nlink = journalIno, 1
	return j, nil
}

// putJournal records the journal in the superblock, with the backup of
// its inode's block map that e2fsck and the kernel fall back on.
func (w *Writer) putJournal(sb []byte, j *Node) {
	le := binary.LittleEndian
	le.PutUint32(sb[0x5C:], le.Uint32(sb[0x5C:])|compatHasJournal)
	le.PutUint32(sb[superJournalInum:], journalIno)
	sb[superJnlBackupType] = jnlBackupBlocks
	iblock := make([]byte, 60)
	w.putBlockMap(iblock, j, j.runs())
	copy(sb[superJnlBlocks:], iblock)
	le.PutUint32(sb[superJnlBlocks+15*4:], uint32(uint64(j.size)>>32))
	le.PutUint32(sb[superJnlBlocks+16*4:], uint32(j.size))
}
