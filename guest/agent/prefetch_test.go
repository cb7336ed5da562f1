package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPrefetchHoldsTheProgramUntilReleased: the program stays open while
// its command may still start, and is let go after the release.
func TestPrefetchHoldsTheProgramUntilReleased(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/prog"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "bin/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)
	prog, _ := filepath.EvalSymlinks(filepath.Join(root, "bin/prog"))
	holds := func() bool {
		fds, _ := os.ReadDir("/proc/self/fd")
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target == prog {
				return true
			}
		}
		return false
	}
	release := prefetch(rootFD, "/bin/prog")
	if !holds() {
		t.Fatal("the program is not held while its command starts")
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for holds() {
		if time.Now().After(deadline) {
			t.Fatal("the program is still held after the release")
		}
		time.Sleep(time.Millisecond)
	}
	prefetch(rootFD, "/bin/fifo")()    // not a program to read: nothing held, no hang
	prefetch(rootFD, "/bin/missing")() // left to the execve
}
