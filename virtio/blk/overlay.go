package blk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Copy-on-write layers, for forks on filesystems that cannot clone a file
// (FICLONE: ext4, tmpfs). A layer is one file whose name ends in
// OverlaySuffix:
//
//	[0, 4096)            header: magic "SMOLCOW1", version u32 (1),
//	                     cluster u32 (65536), size u64 (the disk's
//	                     bytes), base name length u16, 6 reserved bytes,
//	                     then the base's file name
//	[4096, 4096+size)    the clusters the layer holds, each at its own
//	                     offset (sparse: the rest are holes)
//	[bitmapOff, end)     one bit per cluster, set when the layer holds it;
//	                     bitmapOff is 4096+size rounded up to 4096
//
// A cluster whose bit is clear reads from the base: a file of the same
// directory, a raw image or itself a layer (a fork of a fork), never
// written again once it is a base. Forks share bases by hard links, one
// per machine directory, so a base lives exactly as long as a layer above
// it. A write to a cluster not yet held copies the cluster up first
// (unless the write covers it); the bitmap reaches the file on Flush,
// after the data (fdatasync, bitmap, fdatasync), so a crash loses at most
// what the guest had not flushed, as with any disk's write cache.
//
// The header and bitmap lie outside the guest's view of the disk: a guest
// cannot forge them. The name of a layer (the suffix) is what marks it,
// never its contents.

// OverlaySuffix ends the file name of a copy-on-write layer.
const OverlaySuffix = ".smolcow"

const (
	cowMagic      = "SMOLCOW1"
	cowVersion    = 1
	cowCluster    = 64 << 10
	cowHeader     = 4096
	cowHeaderHead = 32
	// maxChain bounds the layers under one disk: deeper, a fork copies
	// (Chain reports it) instead of stacking another layer.
	maxChain   = 16
	maxCowSize = 1 << 44
)

// MaxChain is how many layers a disk may stack.
const MaxChain = maxChain

// overlay is a layer's state: its base and which clusters it holds.
type overlay struct {
	base      *Disk
	size      int64
	bitmapOff int64
	baseName  string

	mu     sync.Mutex
	bitmap []byte
	dirty  bool // bits set since the bitmap was last written
}

func (o *overlay) has(c int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bitmap[c/8]&(1<<(c%8)) != 0
}

func (o *overlay) set(from, to int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for c := from; c <= to; c++ {
		o.bitmap[c/8] |= 1 << (c % 8)
	}
	o.dirty = true
}

// clusterEnd is where cluster c ends, within the disk.
func (o *overlay) clusterEnd(c int64) int64 { return min((c+1)*cowCluster, o.size) }

func bitmapOffset(size int64) int64 { return (cowHeader + size + 4095) / 4096 * 4096 }

func bitmapLen(size int64) int64 { return (size/cowCluster + 1 + 7) / 8 }

// checkBaseName refuses a base that is not a plain file name: bases are
// always beside their layer.
func checkBaseName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("a base named %q", name)
	}
	return nil
}

// openOverlay reads the layer f (opened at path) and opens its base.
func openOverlay(f *os.File, path string, readOnly, lock bool, depth int) (*overlay, int64, error) {
	if depth > maxChain {
		return nil, 0, fmt.Errorf("more than %d layers", maxChain)
	}
	hdr := make([]byte, cowHeader)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, 0, fmt.Errorf("layer header: %v", err)
	}
	le := binary.LittleEndian
	if string(hdr[:8]) != cowMagic {
		return nil, 0, errors.New("no SMOLCOW1 magic: not a copy-on-write layer")
	}
	if v, c := le.Uint32(hdr[8:]), le.Uint32(hdr[12:]); v != cowVersion || c != cowCluster {
		return nil, 0, fmt.Errorf("layer version %d, cluster %d (this smol reads %d, %d)", v, c, cowVersion, cowCluster)
	}
	size := int64(le.Uint64(hdr[16:]))
	n := int(le.Uint16(hdr[24:]))
	if size < SectorSize || size > maxCowSize || size%SectorSize != 0 || n > cowHeader-cowHeaderHead {
		return nil, 0, fmt.Errorf("a layer of %d bytes", size)
	}
	o := &overlay{size: size, bitmapOff: bitmapOffset(size), baseName: string(hdr[cowHeaderHead : cowHeaderHead+n])}
	if err := checkBaseName(o.baseName); err != nil {
		return nil, 0, err
	}
	o.bitmap = make([]byte, bitmapLen(size))
	if _, err := f.ReadAt(o.bitmap, o.bitmapOff); err != nil {
		return nil, 0, fmt.Errorf("layer bitmap: %v (truncated?)", err)
	}
	base, err := open(filepath.Join(filepath.Dir(path), o.baseName), true, lock, depth+1)
	if err != nil {
		return nil, 0, fmt.Errorf("its base: %w", err)
	}
	if int64(base.sectors)*SectorSize != size {
		base.Close()
		return nil, 0, fmt.Errorf("a layer of %d bytes over a base of %d", size, int64(base.sectors)*SectorSize)
	}
	o.base = base
	return o, size, nil
}

// CreateOverlay makes path (which must not exist, and end in
// OverlaySuffix) an empty layer over base, a file name in path's
// directory, of size bytes (the base's).
func CreateOverlay(path, base string, size int64) error {
	if !strings.HasSuffix(path, OverlaySuffix) {
		return fmt.Errorf("a layer's name ends in %s: %s", OverlaySuffix, path)
	}
	if err := checkBaseName(base); err != nil {
		return err
	}
	if size < SectorSize || size > maxCowSize || size%SectorSize != 0 {
		return fmt.Errorf("a layer of %d bytes", size)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	hdr := make([]byte, cowHeader)
	copy(hdr, cowMagic)
	le := binary.LittleEndian
	le.PutUint32(hdr[8:], cowVersion)
	le.PutUint32(hdr[12:], cowCluster)
	le.PutUint64(hdr[16:], uint64(size))
	le.PutUint16(hdr[24:], uint16(len(base)))
	copy(hdr[cowHeaderHead:], base)
	_, err = f.WriteAt(hdr, 0)
	if err == nil {
		err = f.Truncate(bitmapOffset(size) + bitmapLen(size)) // an empty bitmap: holes
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// Chain lists the base files under the disk at path, nearest first (none
// for a raw image): what a copy of the layer needs beside it.
func Chain(path string) ([]string, error) {
	var names []string
	for depth := 0; strings.HasSuffix(path, OverlaySuffix); depth++ {
		if depth > maxChain {
			return nil, fmt.Errorf("disk %s: more than %d layers", path, maxChain)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		hdr := make([]byte, cowHeader)
		_, err = f.ReadAt(hdr, 0)
		f.Close()
		if err != nil || string(hdr[:8]) != cowMagic {
			return nil, fmt.Errorf("disk %s: not a copy-on-write layer", path)
		}
		n := int(binary.LittleEndian.Uint16(hdr[24:]))
		if n > cowHeader-cowHeaderHead {
			return nil, fmt.Errorf("disk %s: a damaged layer header", path)
		}
		name := string(hdr[cowHeaderHead : cowHeaderHead+n])
		if err := checkBaseName(name); err != nil {
			return nil, fmt.Errorf("disk %s: %w", path, err)
		}
		names = append(names, name)
		path = filepath.Join(filepath.Dir(path), name)
	}
	return names, nil
}

// readOverlay serves a read of a layer: runs of clusters it holds from its
// file, the rest from its base.
func (d *Disk) readOverlay(bufs [][]byte, off int64) (int, error) {
	o := d.cow
	total := 0
	end := off + int64(bufsLen(bufs))
	for pos := off; pos < end; {
		c := pos / cowCluster
		held := o.has(c)
		runEnd := min(o.clusterEnd(c), end)
		for runEnd < end && o.has(runEnd/cowCluster) == held {
			runEnd = min(o.clusterEnd(runEnd/cowCluster), end)
		}
		var head [][]byte
		head, bufs = splitBufs(bufs, int(runEnd-pos))
		var n int
		var err error
		if held {
			n, err = d.vectored(head, cowHeader+pos, unix.Preadv, io.ErrUnexpectedEOF)
		} else {
			n, err = o.base.ReadAt(head, pos)
		}
		total += n
		if err != nil {
			return total, err
		}
		pos = runEnd
	}
	return total, nil
}

// writeOverlay writes into the layer, copying up the clusters the write
// only partly covers first.
func (d *Disk) writeOverlay(bufs [][]byte, off int64) (int, error) {
	end := off + int64(bufsLen(bufs))
	if err := d.copyUpEnds(off, end); err != nil {
		return 0, err
	}
	n, err := d.vectored(bufs, cowHeader+off, unix.Pwritev, io.ErrShortWrite)
	if n > 0 {
		d.cow.set(off/cowCluster, (off+int64(n)-1)/cowCluster)
	}
	return n, err
}

// copyUpEnds copies up the first and last clusters of [off, end) where
// the range covers them only in part and the layer does not hold them:
// the clusters in between are overwritten whole.
func (d *Disk) copyUpEnds(off, end int64) error {
	if end <= off {
		return nil
	}
	first, last := off/cowCluster, (end-1)/cowCluster
	for _, c := range []int64{first, last} {
		covered := off <= c*cowCluster && end >= d.cow.clusterEnd(c)
		if covered || d.cow.has(c) {
			continue
		}
		if err := d.copyUp(c); err != nil {
			return err
		}
	}
	return nil
}

// copyUp copies cluster c from the base into the layer.
func (d *Disk) copyUp(c int64) error {
	o := d.cow
	buf := make([]byte, o.clusterEnd(c)-c*cowCluster)
	if _, err := o.base.ReadAt([][]byte{buf}, c*cowCluster); err != nil {
		return err
	}
	if _, err := d.vectored([][]byte{buf}, cowHeader+c*cowCluster, unix.Pwritev, io.ErrShortWrite); err != nil {
		return err
	}
	o.set(c, c)
	return nil
}

// zeroOverlay makes [off, off+length) of a layer read as zeros: the
// clusters partly covered are copied up, then the range is zeroed in the
// layer (a hole where it can) and marked held, so the base shows through
// nowhere in it. Discard (unmap) does the same: a discarded range must
// not read back as what the base held.
func (d *Disk) zeroOverlay(off, length int64, unmap bool) error {
	if length == 0 {
		return nil
	}
	if err := d.copyUpEnds(off, off+length); err != nil {
		return err
	}
	if err := d.zeroRange(cowHeader+off, length, unmap); err != nil {
		return err
	}
	d.cow.set(off/cowCluster, (off+length-1)/cowCluster)
	return nil
}

// flushOverlay makes the layer durable: its data first, then the bitmap
// that points at it.
func (d *Disk) flushOverlay() error {
	if err := d.fdatasync(); err != nil {
		return err
	}
	o := d.cow
	o.mu.Lock()
	if !o.dirty {
		o.mu.Unlock()
		return nil
	}
	bitmap := append([]byte(nil), o.bitmap...)
	o.dirty = false
	o.mu.Unlock()
	if _, err := d.vectored([][]byte{bitmap}, o.bitmapOff, unix.Pwritev, io.ErrShortWrite); err != nil {
		o.mu.Lock()
		o.dirty = true
		o.mu.Unlock()
		return err
	}
	return d.fdatasync()
}

// Freeze makes the disk's contents as they are now a read-only base (a
// new name beside the disk's file, a hard link to it: stem plus ".img",
// or OverlaySuffix when the disk is a layer already), and the disk from
// now on an empty layer over it, at the disk's path with OverlaySuffix
// (replacing the layer that was there). The caller has stopped the disk's
// I/O (the device is paused); the VM goes on writing into the new layer.
// It returns the disk's new path and the base's name.
func (d *Disk) Freeze(stem string) (path, base string, err error) {
	if d.readOnly || d.blockDev {
		return "", "", fmt.Errorf("disk %s: only a writable image file can be frozen", d.path)
	}
	if d.Depth() >= maxChain {
		return "", "", fmt.Errorf("disk %s: already %d layers deep", d.path, maxChain)
	}
	base = stem + ".img"
	if d.cow != nil {
		base = stem + OverlaySuffix
	}
	top, err := d.freeze(base)
	return top, base, err
}

// Depth is how many layers the disk has under it.
func (d *Disk) Depth() int {
	n := 0
	for l := d; l.cow != nil; l = l.cow.base {
		n++
	}
	return n
}

func (d *Disk) freeze(base string) (string, error) {
	if err := checkBaseName(base); err != nil {
		return "", err
	}
	if err := d.Flush(); err != nil {
		return "", err
	}
	dir := filepath.Dir(d.path)
	top := d.path
	if !strings.HasSuffix(top, OverlaySuffix) {
		top = strings.TrimSuffix(top, filepath.Ext(top)) + OverlaySuffix
	}
	if err := os.Link(d.path, filepath.Join(dir, base)); err != nil {
		return "", fmt.Errorf("disk %s: %w", d.path, err)
	}
	size := int64(d.sectors) * SectorSize
	tmp := filepath.Join(dir, ".new-"+filepath.Base(top))
	os.Remove(tmp)
	if err := CreateOverlay(tmp, base, size); err != nil {
		os.Remove(filepath.Join(dir, base))
		return "", err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(tmp)
		os.Remove(filepath.Join(dir, base))
		return "", err
	}
	// The frozen file becomes the base: read-only, its lock shared so
	// the layers of other machines can open it too.
	old := &Disk{file: d.file, raw: d.raw, path: filepath.Join(dir, base), readOnly: true, sectors: d.sectors, serial: d.serial, cow: d.cow}
	if err := old.withFD(func(fd int) error { return unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) }); err != nil {
		f.Close()
		os.Remove(tmp)
		os.Remove(filepath.Join(dir, base))
		return "", fmt.Errorf("disk %s: %w", d.path, err)
	}
	layer, err := newDisk(f, top, false, true)
	if err == nil {
		layer.cow = &overlay{base: old, size: size, bitmapOff: bitmapOffset(size), baseName: base, bitmap: make([]byte, bitmapLen(size))}
		err = os.Rename(tmp, top)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		os.Remove(filepath.Join(dir, base))
		old.withFD(func(fd int) error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
		return "", fmt.Errorf("disk %s: %w", d.path, err)
	}
	if top != d.path {
		os.Remove(d.path) // a name of the base now; the layer replaces it
	}
	syncDir(dir)
	d.file, d.raw, d.path, d.cow = layer.file, layer.raw, top, layer.cow
	return top, nil
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}

// bufsLen is the total length of bufs.
func bufsLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// splitBufs cuts bufs after n bytes, without copying data.
func splitBufs(bufs [][]byte, n int) (head, tail [][]byte) {
	for i, b := range bufs {
		if n < len(b) {
			head = append(append(head, bufs[:i]...), b[:n])
			return head, append([][]byte{b[n:]}, bufs[i+1:]...)
		}
		n -= len(b)
		if n == 0 {
			return bufs[:i+1], bufs[i+1:]
		}
	}
	return bufs, nil
}
