package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Block sizes of the disk measurements: large sequential requests show
// bandwidth, small random ones the per-request cost.
const (
	seqBlock  = 1 << 20
	randBlock = 4 << 10
)

// diskBench measures dev with O_DIRECT, so that every request reaches the
// device instead of the guest's page cache: sequential write (then fsync,
// counted), sequential read, and random 4 KiB reads with qd requests in
// flight, each for secs seconds. Sequential passes wrap around at the end of
// a device smaller than what secs allows. The write pass comes first so the
// reads see written blocks; it destroys what dev held.
func diskBench(dev string, secs float64, qd int) error {
	if qd < 1 || qd > 256 {
		return fmt.Errorf("queue depth %d: want 1..256", qd)
	}
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("size of %s: %w", dev, err)
	}
	if size < seqBlock {
		return fmt.Errorf("%s has %d bytes: need at least %d", dev, size, seqBlock)
	}
	d := time.Duration(secs * float64(time.Second))

	bytes, elapsed, err := sequential(f, size, d, true)
	if err != nil {
		return fmt.Errorf("sequential write: %w", err)
	}
	result("blk-seq-write", mbps(bytes, elapsed), "MB/s")
	bytes, elapsed, err = sequential(f, size, d, false)
	if err != nil {
		return fmt.Errorf("sequential read: %w", err)
	}
	result("blk-seq-read", mbps(bytes, elapsed), "MB/s")
	ops, elapsed, err := randomReads(f, size, d, qd)
	if err != nil {
		return fmt.Errorf("random read: %w", err)
	}
	result("blk-rand-read", float64(ops)/elapsed.Seconds(), "IOPS")
	return nil
}

// alignedBuffer returns n bytes of page-aligned memory, as O_DIRECT needs.
func alignedBuffer(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("buffer: %w", err)
	}
	return b, nil
}

// sequential writes or reads 1 MiB blocks from offset 0 until d has passed.
// A write pass ends with fsync, inside the measured time: the data is on
// the device, not in a cache of the VMM's choosing.
func sequential(f *os.File, size int64, d time.Duration, write bool) (int64, time.Duration, error) {
	buf, err := alignedBuffer(seqBlock)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	end := size - size%seqBlock
	var total, off int64
	start := time.Now()
	for time.Since(start) < d {
		var n int
		if write {
			n, err = f.WriteAt(buf, off)
		} else {
			n, err = f.ReadAt(buf, off)
		}
		total += int64(n)
		if err != nil {
			return total, 0, fmt.Errorf("at %d: %w", off, err)
		}
		if off += seqBlock; off >= end {
			off = 0
		}
	}
	if write {
		if err := f.Sync(); err != nil {
			return total, 0, fmt.Errorf("fsync: %w", err)
		}
	}
	return total, time.Since(start), nil
}

// randomReads runs qd readers of 4 KiB blocks at random aligned offsets
// until d has passed and returns how many reads completed.
func randomReads(f *os.File, size int64, d time.Duration, qd int) (int64, time.Duration, error) {
	blocks := size / randBlock
	var ops atomic.Int64
	errs := make(chan error, qd)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < qd; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := alignedBuffer(randBlock)
			if err != nil {
				errs <- err
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for time.Since(start) < d {
				off := rng.Int64N(blocks) * randBlock
				if _, err := f.ReadAt(buf, off); err != nil {
					errs <- fmt.Errorf("at %d: %w", off, err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return ops.Load(), elapsed, nil
}

func mbps(bytes int64, d time.Duration) float64 {
	return float64(bytes) / 1e6 / d.Seconds()
}
