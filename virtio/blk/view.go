package blk

import (
	"github.com/smolvm/smol/internal/sparsefile"
)

// View is a disk as one flat image, for copying it (a snapshot's disk
// region, a pack's writable layer): an io.ReaderAt whose DataExtents
// skips what is a hole in every layer, so a copy costs the data.
type View struct{ d *Disk }

// View returns the disk as a flat image.
func (d *Disk) View() View { return View{d} }

// Size is the disk's size in bytes.
func (v View) Size() int64 { return int64(v.d.sectors) * SectorSize }

// ReadAt reads len(p) bytes at off.
func (v View) ReadAt(p []byte, off int64) (int, error) { return v.d.ReadAt([][]byte{p}, off) }

// DataExtents calls fn for each run of [from, to) that may hold data
// (sparsefile.Extenter).
func (v View) DataExtents(from, to int64, fn func(start, end int64) error) error {
	d := v.d
	if d.cow == nil {
		return sparsefile.DataExtents(d.file, from, to, fn)
	}
	o := d.cow
	for pos := from; pos < to; {
		c := pos / cowCluster
		held := o.has(c)
		runEnd := min(o.clusterEnd(c), to)
		for runEnd < to && o.has(runEnd/cowCluster) == held {
			runEnd = min(o.clusterEnd(runEnd/cowCluster), to)
		}
		var err error
		if held {
			err = sparsefile.DataExtents(d.file, cowHeader+pos, cowHeader+runEnd, func(s, e int64) error {
				return fn(s-cowHeader, e-cowHeader)
			})
		} else {
			err = o.base.View().DataExtents(pos, runEnd, fn)
		}
		if err != nil {
			return err
		}
		pos = runEnd
	}
	return nil
}
