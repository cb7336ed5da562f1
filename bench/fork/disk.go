package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/smolvm/smol/bench/internal/stats"
	"github.com/smolvm/smol/internal/sparsefile"
	"github.com/smolvm/smol/virtio/blk"
)

// benchDisks measures what a fork costs in disk: giving each of children
// its own writable layer of a disk holding dataMiB of data, as a fork does
// on this filesystem (copy-on-write layers over the frozen disk where
// there is no FICLONE), against copying the disk for each child
// (sparsefile.Clone: a reflink where there is one, else a copy of its
// data), in the same session. Both sides start from the same open disk.
func benchDisks(dir string, n, children, dataMiB int) error {
	template := filepath.Join(dir, "template.img")
	if err := writeDataDisk(template, 2<<30, dataMiB); err != nil {
		return err
	}
	defer os.Remove(template)
	var layers, copies []float64
	var layerBytes, copyBytes int64
	for i := 0; i < n; i++ {
		round := filepath.Join(dir, fmt.Sprintf("disk-round-%d", i))
		if err := os.Mkdir(round, 0o700); err != nil {
			return err
		}
		src := filepath.Join(round, "storage.ext4")
		if _, err := sparsefile.Clone(template, src); err != nil {
			return err
		}
		d, err := blk.Open(src, false)
		if err != nil {
			return err
		}
		// Copies first, while the disk is still raw.
		start := time.Now()
		for c := 0; c < children; c++ {
			if _, err := sparsefile.Clone(src, filepath.Join(round, fmt.Sprintf("copy-%d.img", c))); err != nil {
				return err
			}
		}
		copies = append(copies, ms(time.Since(start)))
		start = time.Now()
		_, base, err := d.Freeze("storage.base")
		if err != nil {
			return err
		}
		for c := 0; c < children; c++ {
			child := filepath.Join(round, fmt.Sprintf("child-%d", c))
			if err := os.Mkdir(child, 0o700); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(round, base), filepath.Join(child, base)); err != nil {
				return err
			}
			if err := blk.CreateOverlay(filepath.Join(child, "storage"+blk.OverlaySuffix), base, int64(d.Sectors())*blk.SectorSize); err != nil {
				return err
			}
		}
		layers = append(layers, ms(time.Since(start)))
		d.Close()
		layerBytes = allocated(filepath.Join(round, "child-0", "storage"+blk.OverlaySuffix))
		copyBytes = allocated(filepath.Join(round, "copy-0.img"))
		os.RemoveAll(round)
		fmt.Printf("disk round %d: %d copy-on-write layers %.1f ms, %d copies %.1f ms\n", i+1, children, layers[i], children, copies[i])
	}
	l, c := stats.Median(layers), stats.Median(copies)
	fmt.Printf("disk: %d children of a 2 GiB disk holding %d MiB: layers %.1f ms (%.0f KiB allocated each), copies %.1f ms (%.0f MiB each): ratio %.4f\n",
		children, dataMiB, l, float64(layerBytes)/1024, c, float64(copyBytes)/(1<<20), l/c)
	return nil
}

// writeDataDisk writes a sparse disk of size bytes holding dataMiB MiB of
// random data in 1 MiB runs spread over it.
func writeDataDisk(path string, size int64, dataMiB int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	stride := size / int64(dataMiB)
	for i := 0; i < dataMiB; i++ {
		rand.Read(buf)
		if _, err := f.WriteAt(buf, int64(i)*stride); err != nil {
			return err
		}
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// allocated is the file's allocated bytes.
func allocated(path string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}
