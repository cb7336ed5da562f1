// Package settle puts the test box's memory in the same state before every
// VM a benchmark starts.
//
// In the test box, the memory a VM just freed slows the next VM that
// writes into it: the same smol build's exec to first KVM_RUN went from
// ~90 to 130-340 ms after another smol's boot, QEMU's boot to init from
// ~2.0 to ~2.3 s after any VM's. Whatever the cause (the box's software
// CPU keeps state for pages that held code, presumably), writing
// and freeing some memory first puts every VM in the same state, whoever
// went before.
package settle

import (
	"fmt"
	"os"
)

// Memory writes mib MiB to a tmpfs file and frees it; 0 or less does
// nothing.
func Memory(mib int) error {
	if mib <= 0 {
		return nil
	}
	dir := "/dev/shm" // tmpfs where there is one: the point is memory, not a disk
	if _, err := os.Stat(dir); err != nil {
		dir = ""
	}
	f, err := os.CreateTemp(dir, "smol-bench-settle-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for range mib {
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
	}
	return nil
}
