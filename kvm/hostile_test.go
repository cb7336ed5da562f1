package kvm

import (
	"encoding/binary"
	"testing"
)

// These tests forge kvm_run contents (the page is ordinary shared memory)
// to check that the accessors never index outside the mapping, whatever
// offsets and lengths the page claims.

func forgedVCPU(reason ExitReason) *VCPU {
	v := &VCPU{fd: -1, run: make([]byte, 4096)}
	binary.LittleEndian.PutUint32(v.run[runExitReason:], uint32(reason))
	return v
}

func TestIORejectsDataOutsideMapping(t *testing.T) {
	cases := []struct {
		name   string
		size   uint8
		count  uint32
		offset uint64
		ok     bool
	}{
		{"in bounds", 4, 2, 4096 - 8, true},
		{"ends at the last byte", 1, 1, 4095, true},
		{"one past the end", 4, 2, 4096 - 7, false},
		{"offset beyond", 1, 1, 1 << 40, false},
		{"offset wraps", 1, 16, ^uint64(0) - 3, false},
		{"huge count", 4, ^uint32(0), 64, false},
	}
	for _, c := range cases {
		v := forgedVCPU(ExitIO)
		v.run[runIOSize] = c.size
		binary.LittleEndian.PutUint32(v.run[runIOCount:], c.count)
		binary.LittleEndian.PutUint64(v.run[runIODataOffset:], c.offset)
		io, err := v.IO()
		if c.ok {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if len(io.Data) != int(c.size)*int(c.count) || cap(io.Data) != len(io.Data) {
				t.Errorf("%s: data len %d cap %d", c.name, len(io.Data), cap(io.Data))
			}
		} else if err == nil {
			t.Errorf("%s: accepted data [%#x, +%d*%d) in a 4096-byte page", c.name, c.offset, c.count, c.size)
		}
	}
}

func TestMMIORejectsLongData(t *testing.T) {
	v := forgedVCPU(ExitMMIO)
	binary.LittleEndian.PutUint32(v.run[runMMIOLen:], 9)
	if _, err := v.MMIO(); err == nil {
		t.Fatal("MMIO with len 9 accepted")
	}
	binary.LittleEndian.PutUint32(v.run[runMMIOLen:], 8)
	m, err := v.MMIO()
	if err != nil || len(m.Data) != 8 || cap(m.Data) != 8 {
		t.Fatalf("MMIO len 8: %+v, %v", m, err)
	}
}

func TestExitDetailsCapped(t *testing.T) {
	v := forgedVCPU(ExitInternalError)
	binary.LittleEndian.PutUint32(v.run[runInternalSuberror:], InternalErrorEmulation)
	binary.LittleEndian.PutUint32(v.run[runInternalNData:], 1000)
	ie, err := v.InternalError()
	if err != nil || ie.Suberror != InternalErrorEmulation || len(ie.Data) != runInternalDataMax {
		t.Fatalf("InternalError() = %+v, %v; want 16 data words", ie, err)
	}

	v = forgedVCPU(ExitSystemEvent)
	binary.LittleEndian.PutUint32(v.run[runSystemEventType:], SystemEventReset)
	binary.LittleEndian.PutUint32(v.run[runSystemEventNData:], 1<<31)
	binary.LittleEndian.PutUint64(v.run[runSystemEventData:], 0xabc)
	se, err := v.SystemEvent()
	if err != nil || se.Type != SystemEventReset || len(se.Data) != runSystemEventMax || se.Data[0] != 0xabc {
		t.Fatalf("SystemEvent() = %+v, %v", se, err)
	}

	// Accessors refuse exits of another kind instead of decoding garbage.
	if _, err := v.IO(); err == nil {
		t.Error("IO() on a SYSTEM_EVENT exit succeeded")
	}
	if _, err := v.MMIO(); err == nil {
		t.Error("MMIO() on a SYSTEM_EVENT exit succeeded")
	}
	if _, err := v.FailEntry(); err == nil {
		t.Error("FailEntry() on a SYSTEM_EVENT exit succeeded")
	}
	if _, err := v.Debug(); err == nil {
		t.Error("Debug() on a SYSTEM_EVENT exit succeeded")
	}

	v = forgedVCPU(ExitFailEntry)
	binary.LittleEndian.PutUint64(v.run[runFailEntryReason:], 0x80000021)
	binary.LittleEndian.PutUint32(v.run[runFailEntryCPU:], 3)
	fe, err := v.FailEntry()
	if err != nil || fe.HardwareEntryFailureReason != 0x80000021 || fe.CPU != 3 {
		t.Fatalf("FailEntry() = %+v, %v", fe, err)
	}
}
