package main

import (
	"github.com/smolvm/smol/internal/rootlookup"
	"golang.org/x/sys/unix"
)

// A container's program lives on its root's 9P share, which the guest
// mounts with cache=mmap: nothing of a file stays cached once nobody
// holds it, so every start of a container reads its program from the
// host again, through the page faults of its execve, one readahead
// window at a time, after the rest of the start (the root's mounts, the
// cgroup, the launcher) is done. prefetch reads those windows ahead
// while the rest is being done, and holds the file open so that they
// stay cached until the program has mapped them: the execve then finds
// its pages in memory. (In a pod on the test box this was a quarter of
// the time from StartContainer's answer to the container's first output.)

// prefetchLimit bounds what is read ahead of a program: its start
// touches its first pages and a few scattered ones, and a large binary
// (an interpreter with its libraries built in) would otherwise be read
// whole for a start that needs a fraction of it.
const prefetchLimit = 16 << 20

// prefetchChunk is one read-ahead request: the kernel reads at most one
// readahead window per request (the share's msize, 512 KiB, less the 9P
// header: shareOptions), so a larger chunk would leave holes.
const prefetchChunk = 448 << 10

// prefetch starts reading the first prefetchLimit bytes of the regular
// file path of the root into the page cache and returns the call that
// lets it go (once the command has ended: a file a command still maps
// stays cached whatever this does). A program it cannot open is left to
// the execve, which says why.
func prefetch(rootFD int, path string) (release func()) {
	f := rootlookup.File(rootFD, path)
	if f == nil {
		return func() {}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return func() {}
	}
	fd := int(f.Fd())
	done := make(chan struct{})
	go func() {
		defer close(done)
		end := min(fi.Size(), prefetchLimit)
		for off := int64(0); off < end; off += prefetchChunk {
			// Each call reads its chunk before it returns (9P reads are
			// synchronous): the next starts where the last ended.
			if unix.Fadvise(fd, off, min(prefetchChunk, end-off), unix.FADV_WILLNEED) != nil {
				return
			}
		}
	}()
	return func() {
		go func() {
			<-done
			f.Close()
		}()
	}
}
