package blk

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
	"github.com/smolvm/smol/vmm/memory"
)

// TestThroughTheMMIOTransport drives the device as a Linux guest would:
// feature negotiation, queue setup and DRIVER_OK through the virtio-mmio
// registers, requests through direct and indirect chains, notifications
// through QueueNotify and completions through the transport's interrupt.
func TestThroughTheMMIOTransport(t *testing.T) {
	mem, err := memory.New(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	path := newImage(t, 128*SectorSize)
	disk, err := Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := New(disk, Options{Serial: "smol-test-disk"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	irq := virtiotest.NewIRQ()
	transport := virtio.NewMMIO(dev, mem, irq)
	drv := virtiotest.Init(t, transport, mem, virtiotest.Options{})

	if got := drv.Read32(virtiotest.RegDeviceID); got != uint32(virtio.IDBlock) {
		t.Fatalf("device ID %d", got)
	}
	for _, f := range []uint64{FeatureFlush, FeatureDiscard, FeatureWriteZeroes, FeatureSegMax, FeatureBlkSize, virtio.FeatureRingIndirectDesc, virtio.FeatureRingEventIdx} {
		if drv.Features&f == 0 {
			t.Errorf("feature %#x not negotiated (have %#x)", f, drv.Features)
		}
	}
	if got := binary.LittleEndian.Uint64(drv.ReadConfig(cfgCapacity, 8)); got != 128 {
		t.Errorf("capacity through the transport: %d", got)
	}
	q := drv.Queues[0]
	if q.Size() != QueueSize {
		t.Errorf("queue size %d", q.Size())
	}

	submit := func(indirect bool, readable [][]byte, writable []uint32) virtiotest.UsedElem {
		t.Helper()
		before := irq.Count()
		// EVENT_IDX was negotiated: ask for an interrupt at the next
		// completion, as Linux does when it re-enables callbacks.
		q.SetUsedEvent(q.UsedIdx())
		if indirect {
			q.AddIndirectChain(readable, writable)
		} else {
			q.AddChain(readable, writable)
		}
		drv.Notify(0)
		u := q.WaitUsed(1, waitTimeout)[0]
		if !irq.Wait(waitTimeout) && irq.Count() == before {
			t.Fatal("no interrupt for a completed request")
		}
		if drv.AckInterrupts()&1 == 0 && irq.Count() == before {
			t.Error("InterruptStatus lacks the used-buffer bit")
		}
		return u
	}

	data := pattern(4*SectorSize, 0x33)
	if u := submit(true, [][]byte{header(TypeOut, 100), data}, []uint32{1}); u.Data[u.Len-1] != StatusOK {
		t.Fatalf("indirect write status %d", u.Data[u.Len-1])
	}
	u := submit(false, [][]byte{header(TypeIn, 100)}, []uint32{4 * SectorSize, 1})
	if u.Data[u.Len-1] != StatusOK || !bytes.Equal(u.Data[:4*SectorSize], data) {
		t.Fatal("read back through the transport differs")
	}
	u = submit(false, [][]byte{header(TypeGetID, 0)}, []uint32{IDBytes + 1})
	if got := string(bytes.TrimRight(u.Data[:IDBytes], "\x00")); got != "smol-test-disk" {
		t.Errorf("GET_ID %q", got)
	}
	if u := submit(true, [][]byte{header(TypeFlush, 0)}, []uint32{1}); u.Data[0] != StatusOK {
		t.Errorf("flush status %d", u.Data[0])
	}

	// A driver reset stops the device: later requests stay unanswered.
	drv.Reset()
	q.AddChain([][]byte{header(TypeFlush, 0)}, []uint32{1})
	drv.Notify(0)
	time.Sleep(50 * time.Millisecond)
	if got := q.Used(); len(got) != 0 {
		t.Errorf("device answered after reset: %+v", got)
	}
	if st := dev.Stats(); st.Writes != 1 || st.Reads != 1 || st.GetIDs != 1 || st.Flushes != 1 {
		t.Errorf("stats %+v", st)
	}
}
