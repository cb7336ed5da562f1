package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unsafe"

	"github.com/smolvm/smol/agent"
	"golang.org/x/sys/unix"
)

// The random device's ioctls (linux/random.h).
const (
	rndAddEntropy   = 0x40085203 // _IOW('R', 0x03, int[2])
	rndReseedCRNG   = 0x5207     // _IO('R', 0x07)
	bitsPerSeedByte = 8
)

// applyIdentity makes this guest the machine id describes (a restored or
// forked one): entropy first, so nothing drawn afterwards repeats a
// sibling's, then the clock, the names and the generation. Any failure is
// returned, and the host then refuses to hand the machine out: a clone
// with its parent's random state is worse than none.
func applyIdentity(id *agent.Identity) error {
	if len(id.Seed) > 0 {
		if err := addEntropy(id.Seed); err != nil {
			return fmt.Errorf("reseeding the kernel's random generator: %w", err)
		}
	}
	if id.Time != 0 {
		ts := unix.NsecToTimespec(id.Time)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			return fmt.Errorf("setting the clock: %w", err)
		}
	}
	if id.MachineID != "" {
		if err := os.MkdirAll("/etc", 0o755); err != nil { // an image may have no /etc
			return fmt.Errorf("machine-id: %w", err)
		}
		if err := replaceFile("/etc/machine-id", id.MachineID+"\n", 0o444); err != nil {
			return fmt.Errorf("machine-id: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(agent.GenerationFile), 0o755); err != nil {
		return err
	}
	if err := replaceFile(agent.GenerationFile, strconv.FormatUint(id.Generation, 10)+"\n", 0o444); err != nil {
		return fmt.Errorf("generation: %w", err)
	}
	if id.ID != "" {
		if err := replaceFile(agent.IDFile, id.ID+"\n", 0o444); err != nil {
			return fmt.Errorf("id: %w", err)
		}
	}
	return nil
}

// syncClock sets the clock from the host's (agent.AskClock): a guest slow
// to read its identity (a busy host) thus gets the host's time to within
// half a quick round trip, not the time at which the identity was sent.
func (s *session) syncClock(r *agent.Reader) error {
	estimate, at, err := agent.AskClock(r, s.w)
	if err != nil {
		return err
	}
	ts := unix.NsecToTimespec(estimate + int64(time.Since(at)))
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// addEntropy mixes seed into the kernel's pool, credited in full (it is
// the host's crypto/rand), and makes the generator reseed at once rather
// than at its next scheduled reseed.
func addEntropy(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	buf := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(len(seed) * bitsPerSeedByte)
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(seed))
	copy(buf[8:], seed)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); errno != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", errno)
	}
	return nil
}

// replaceFile writes content to path through a temporary file and a
// rename, so a reader sees the old file or the new one.
func replaceFile(path, content string, mode os.FileMode) error {
	tmp := path + ".smol-tmp"
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
