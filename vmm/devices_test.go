package vmm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/smolvm/smol/vmm/memory"
)

func testDisk(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testMemory(t *testing.T) *memory.Guest {
	t.Helper()
	mem, err := memory.New(MinMemory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return mem
}

// TestDeviceManagerBuildsFromASpec builds every kind of device from a
// plain spec and checks the guest order and the identities it filled in.
func TestDeviceManagerBuildsFromASpec(t *testing.T) {
	dir := t.TempDir()
	spec := Devices{
		Disks:   []Disk{{Path: testDisk(t, dir, "a.img")}, {Path: testDisk(t, dir, "b.img"), ReadOnly: true, Serial: "second"}},
		Vsock:   &Vsock{Path: filepath.Join(dir, "v.sock")},
		Entropy: true,
		Balloon: true,
	}
	devs, resolved, err := openVirtio(spec, testMemory(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, d := range devs {
			closeDevice(d)
		}
	}()
	var kinds []string
	for _, d := range devs {
		kinds = append(kinds, kindOf(d))
	}
	if want := []string{"blk", "blk", "vsock", "rng", "balloon"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("guest order %v, want %v", kinds, want)
	}
	if resolved.Disks[0].Serial == "" || resolved.Disks[1].Serial != "second" {
		t.Errorf("disk serials %q %q", resolved.Disks[0].Serial, resolved.Disks[1].Serial)
	}
	if resolved.Vsock.CID != 3 {
		t.Errorf("default CID %d, want 3", resolved.Vsock.CID)
	}
	if spec.Disks[0].Serial != "" || spec.Vsock.CID != 0 {
		t.Error("openVirtio changed the caller's spec")
	}
	if identityOf(devs[1]) != "second" || identityOf(devs[2]) != "cid 3" {
		t.Errorf("identities %q %q", identityOf(devs[1]), identityOf(devs[2]))
	}
	// The resolved spec is plain data: it survives JSON unchanged, which
	// is what a machine record or a snapshot needs.
	b, err := json.Marshal(resolved)
	if err != nil {
		t.Fatal(err)
	}
	var back Devices
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, resolved) {
		t.Fatalf("JSON round trip: %v\n%s", err, b)
	}
}

// TestDeviceManagerReleasesWhatItOpenedOnError: a bad device later in the
// spec must not leave the earlier ones open (the vsock socket file, the
// disk's lock).
func TestDeviceManagerReleasesWhatItOpenedOnError(t *testing.T) {
	dir := t.TempDir()
	disk := testDisk(t, dir, "a.img")
	sock := filepath.Join(dir, "v.sock")
	spec := Devices{
		Disks: []Disk{{Path: disk}, {Path: filepath.Join(dir, "missing.img")}},
		Vsock: &Vsock{Path: sock},
	}
	if _, _, err := openVirtio(spec, testMemory(t), nil); err == nil || !strings.Contains(err.Error(), "missing.img") {
		t.Fatalf("err = %v, want one naming the missing disk", err)
	}
	// The first disk is free again: opening it read-write succeeds.
	devs, _, err := openVirtio(Devices{Disks: []Disk{{Path: disk}}}, testMemory(t), nil)
	if err != nil {
		t.Fatalf("first disk still held: %v", err)
	}
	for _, d := range devs {
		closeDevice(d)
	}
	spec = Devices{Vsock: &Vsock{Path: sock}}
	for range MaxVirtioDevices {
		spec.Disks = append(spec.Disks, Disk{Path: disk, ReadOnly: true})
	}
	_, _, err = openVirtio(spec, testMemory(t), nil)
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("%d devices: err = %v", MaxVirtioDevices+1, err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("vsock socket left behind: %v", err)
	}
}
