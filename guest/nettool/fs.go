package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// fsBench measures a mounted directory (a shared host directory): a
// sequential write of mib MiB in 1 MiB writes, fsync included, the same
// file read back, and a walk of the tree under dir/many (as find does:
// every entry stat'ed). It prints fs-seq-write and fs-seq-read in MB/s
// and fs-find in entries/s.
func fsBench(dir string, mib int) error {
	path := filepath.Join(dir, "nettool-seq")
	defer os.Remove(path)
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < mib; i++ {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	f.Close()
	result("fs-seq-write", mbps(int64(mib)<<20, time.Since(start)), "MB/s")

	f, err = os.Open(path)
	if err != nil {
		return err
	}
	start = time.Now()
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	f.Close()
	if n != int64(mib)<<20 {
		return fmt.Errorf("read back %d of %d bytes", n, int64(mib)<<20)
	}
	result("fs-seq-read", mbps(n, time.Since(start)), "MB/s")

	start = time.Now()
	entries := 0
	err = filepath.WalkDir(filepath.Join(dir, "many"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := d.Info(); err != nil {
			return err
		}
		entries++
		return nil
	})
	if err != nil {
		return err
	}
	result("fs-find", float64(entries)/time.Since(start).Seconds(), "entries/s")
	return nil
}
