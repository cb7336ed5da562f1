package net

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/smolvm/smol/virtio"
	"github.com/smolvm/smol/virtio/virtiotest"
)

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"zero MAC":      {},
		"multicast MAC": {MAC: [6]byte{0x01, 0, 0x5e, 0, 0, 1}},
		"broadcast MAC": {MAC: [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		"tiny MTU":      {MAC: testMAC, MTU: 67},
	} {
		if _, err := New(newFakeBackend(0), opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
	if _, err := New(nil, Options{MAC: testMAC}); err == nil {
		t.Error("New accepted a nil backend")
	}
}

func TestConfigSpaceAndFeatures(t *testing.T) {
	r := newRig(t, Options{MTU: 9000}, OffloadFeatures, 0)
	if got := r.drv.Read32(virtiotest.RegDeviceID); got != uint32(virtio.IDNet) {
		t.Fatalf("device ID %d", got)
	}
	want := uint64(FeatureMAC | FeatureStatus | FeatureMrgRxBuf | FeatureMTU | OffloadFeatures | virtio.FeatureVersion1 | virtio.FeatureRingEventIdx)
	if r.drv.Features&want != want {
		t.Errorf("negotiated %#x lacks %#x", r.drv.Features, want&^r.drv.Features)
	}
	if r.drv.Features&(FeatureGuestUFO|FeatureHostUFO) != 0 {
		t.Errorf("UFO offered: %#x", r.drv.Features)
	}
	var mac [6]byte
	for i := range mac {
		mac[i] = r.drv.ReadConfig(uint64(i), 1)[0]
	}
	if mac != testMAC {
		t.Errorf("config mac %x", mac)
	}
	le := binary.LittleEndian
	if got := le.Uint16(r.drv.ReadConfig(cfgStatus, 2)); got != StatusLinkUp {
		t.Errorf("status %#x, want LINK_UP", got)
	}
	if got := le.Uint16(r.drv.ReadConfig(cfgMaxVirtqueuePairs, 2)); got != 1 {
		t.Errorf("max_virtqueue_pairs %d", got)
	}
	if got := le.Uint16(r.drv.ReadConfig(cfgMTU, 2)); got != 9000 {
		t.Errorf("mtu %d", got)
	}
	if got := le.Uint32(r.drv.ReadConfig(configSize, 4)); got != 0 {
		t.Errorf("bytes past the config read %#x", got)
	}
	r.drv.WriteConfig(0, []byte{0xff}) // read-only: ignored
	if got := r.drv.ReadConfig(0, 1)[0]; got != testMAC[0] {
		t.Errorf("config write changed the MAC to %#x", got)
	}

	// The backend was told what the driver accepted.
	r.backend.mu.Lock()
	offloads := append([]uint64(nil), r.backend.offloads...)
	r.backend.mu.Unlock()
	if len(offloads) != 1 || offloads[0] != OffloadFeatures {
		t.Errorf("SetOffloads calls %#x, want [%#x]", offloads, uint64(OffloadFeatures))
	}

	// Link down: status clears, and the driver gets a config interrupt.
	gen := r.drv.Read32(virtiotest.RegConfigGeneration)
	if err := r.dev.SetLinkUp(false); err != nil {
		t.Fatal(err)
	}
	if got := le.Uint16(r.drv.ReadConfig(cfgStatus, 2)); got != 0 {
		t.Errorf("status after link down %#x", got)
	}
	if r.drv.Read32(virtiotest.RegConfigGeneration) == gen {
		t.Error("config generation unchanged by a link change")
	}
	if !r.irq.Wait(waitTimeout) || r.drv.AckInterrupts()&virtio.InterruptConfigChange == 0 {
		t.Error("no configuration-change interrupt for a link change")
	}
	if st := r.dev.State(); st.LinkUp || st.MAC != testMAC || st.MTU != 9000 || st.Negotiated != r.drv.Features {
		t.Errorf("state %+v", st)
	}
}

func TestOffersOnlyBackendOffloads(t *testing.T) {
	r := newRig(t, Options{}, 0, 0)
	if r.drv.Features&(OffloadFeatures|FeatureMTU) != 0 {
		t.Errorf("offloads or MTU offered without backend support: %#x", r.drv.Features)
	}
	if r.drv.Features&(FeatureMAC|FeatureStatus|FeatureMrgRxBuf) != FeatureMAC|FeatureStatus|FeatureMrgRxBuf {
		t.Errorf("basic features missing: %#x", r.drv.Features)
	}
}

func TestTransmitReachesBackendExactly(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	frame := ethFrame(300, 1)
	hdr := Header{Flags: HeaderNeedsCsum, CsumStart: 34, CsumOffset: 16}
	p := packet(hdr, frame)

	// Header split across buffers, frame across two more.
	r.send(p[:5], p[5:40], p[40:])
	used := r.tx.WaitUsed(1, waitTimeout)
	if used[0].Len != 0 {
		t.Errorf("transmit used length %d, want 0", used[0].Len)
	}
	got := r.backend.waitSent(1, waitTimeout)
	if len(got) != 1 {
		t.Fatalf("backend got %d frames", len(got))
	}
	mustEqual(t, "transmitted packet", got[0], p)
	if !r.irq.Wait(waitTimeout) {
		t.Error("no interrupt after a transmit")
	}

	// A TSO super-frame through an indirect chain.
	big := packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4 | GSOECN, HdrLen: 54, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}, ethFrame(20000, 2))
	r.tx.SetUsedEvent(r.tx.UsedIdx())
	r.tx.AddIndirectChain([][]byte{big[:HeaderSize], big[HeaderSize:]}, nil)
	r.drv.Notify(TxQueue)
	r.tx.WaitUsed(1, waitTimeout)
	got = r.backend.waitSent(2, waitTimeout)
	if len(got) != 2 {
		t.Fatalf("backend got %d frames", len(got))
	}
	mustEqual(t, "super-frame", got[1], big)
	if st := r.dev.Stats(); st.TxFrames != 2 || st.TxBytes != 300+20000 || st.TxDropped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestTransmitRefusesBadFrames(t *testing.T) {
	// The driver takes everything but UFO and ECN-on-transmit.
	r := newRig(t, Options{}, OffloadFeatures, ^uint64(FeatureHostECN))
	frame := ethFrame(100, 3)
	cases := map[string][][]byte{
		"short header":                {make([]byte, 8)},
		"runt frame":                  {packet(Header{}, frame[:10])},
		"DATA_VALID on tx":            {packet(Header{Flags: HeaderDataValid}, frame)},
		"unknown flag":                {packet(Header{Flags: 0x40}, frame)},
		"csum past the end":           {packet(Header{Flags: HeaderNeedsCsum, CsumStart: 90, CsumOffset: 9}, frame)},
		"GSO without csum":            {packet(Header{GSOType: GSOTCPv4, GSOSize: 1000}, frame)},
		"GSO with zero size":          {packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv6, CsumStart: 54, CsumOffset: 16}, frame)},
		"UDP GSO":                     {packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOUDP, GSOSize: 1000, CsumStart: 34, CsumOffset: 6}, frame)},
		"ECN not negotiated":          {packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4 | GSOECN, GSOSize: 1000, CsumStart: 34, CsumOffset: 16}, frame)},
		"unknown GSO type":            {packet(Header{Flags: HeaderNeedsCsum, GSOType: 2, GSOSize: 1000, CsumStart: 34, CsumOffset: 16}, frame)},
		"ECN without GSO":             {packet(Header{GSOType: GSOECN}, frame)},
		"frame over 65550":            {packet(Header{}, ethFrame(MaxFrameLen+1, 4))},
		"hdr_len past the end":        {packet(Header{HdrLen: 101}, frame)},
		"csum in the Ethernet header": {packet(Header{Flags: HeaderNeedsCsum, CsumStart: 4, CsumOffset: 2}, frame)},
		"GSO tiny segments":           {packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, GSOSize: 1, CsumStart: 34, CsumOffset: 16}, frame)},
		"GSO csum not TCP's":          {packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, GSOSize: 1000, CsumStart: 34, CsumOffset: 6}, frame)},
		"GSO in the IP header":        {packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, GSOSize: 1000, CsumStart: 20, CsumOffset: 16}, frame)},
		"frame in 2 pieces >":         {make([]byte, HeaderSize), ethFrame(MaxFrameLen+1, 5)},
	}
	for name, pieces := range cases {
		r.tx.SetUsedEvent(r.tx.UsedIdx())
		r.send(pieces...)
		if u := r.tx.WaitUsed(1, waitTimeout); u[0].Len != 0 {
			t.Errorf("%s: used length %d", name, u[0].Len)
		}
	}
	if got := r.backend.sentFrames(); len(got) != 0 {
		t.Fatalf("%d refused frames reached the backend", len(got))
	}
	if st := r.dev.Stats(); st.TxDropped != uint64(len(cases)) || st.TxFrames != 0 {
		t.Errorf("stats %+v, want %d dropped", st, len(cases))
	}

	// A descriptor loop: consumed without a used entry, counted.
	r.tx.WriteDesc(200, virtiotest.Desc{Addr: r.tx.Alloc(64), Len: 64, Flags: virtiotest.DescNext, Next: 201})
	r.tx.WriteDesc(201, virtiotest.Desc{Addr: r.tx.Alloc(64), Len: 64, Flags: virtiotest.DescNext, Next: 200})
	r.tx.Publish(200)
	// A good frame after it still goes out.
	good := packet(Header{}, frame)
	r.send(good)
	got := r.backend.waitSent(1, waitTimeout)
	if len(got) != 1 {
		t.Fatalf("good frame after a loop: backend got %d frames", len(got))
	}
	mustEqual(t, "frame after the loop", got[0], good)
	r.tx.WaitUsed(1, waitTimeout)
	if st := r.dev.Stats(); st.Malformed != 1 {
		t.Errorf("malformed %d, want 1", st.Malformed)
	}

	// Backend failures are counted, not fatal.
	r.backend.mu.Lock()
	r.backend.writeErr = errors.New("link gone")
	r.backend.mu.Unlock()
	r.tx.SetUsedEvent(r.tx.UsedIdx())
	r.send(good)
	r.tx.WaitUsed(1, waitTimeout)
	if st := r.dev.Stats(); st.BackendErrors != 1 {
		t.Errorf("backend errors %d", st.BackendErrors)
	}
}

func TestReceiveSingleBuffer(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	frame := ethFrame(1000, 6)
	in := Header{Flags: HeaderDataValid, NumBuffers: 0}
	r.backend.deliver(packet(in, frame))
	// The header straddles the chain's first two buffers.
	r.postRx([]uint32{6, 2042})
	u := r.rx.WaitUsed(1, waitTimeout)[0]
	if u.Len != HeaderSize+1000 {
		t.Fatalf("used length %d", u.Len)
	}
	want := in
	want.NumBuffers = 1
	mustEqual(t, "received packet", u.Data, packet(want, frame))
	if !r.irq.Wait(waitTimeout) {
		t.Error("no interrupt for a received frame")
	}
	if st := r.dev.Stats(); st.RxFrames != 1 || st.RxBytes != 1000 {
		t.Errorf("stats %+v", st)
	}
}

func TestReceiveMergesBuffers(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	if r.drv.Features&FeatureMrgRxBuf == 0 {
		t.Fatal("MRG_RXBUF not negotiated")
	}
	heads := r.postRx([]uint32{1024}, []uint32{1024}, []uint32{1024}, []uint32{1024})
	frame := ethFrame(3000, 7)
	in := Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, HdrLen: 54, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}
	r.backend.deliver(packet(in, frame))
	used := r.rx.WaitUsed(3, waitTimeout)
	if len(used) != 3 {
		t.Fatalf("%d used entries", len(used))
	}
	for i, wantLen := range []uint32{1024, 1024, 3012 - 2048} {
		if used[i].Head != heads[i] || used[i].Len != wantLen {
			t.Errorf("entry %d: head %d len %d, want head %d len %d", i, used[i].Head, used[i].Len, heads[i], wantLen)
		}
	}
	want := in
	want.NumBuffers = 3
	mustEqual(t, "merged packet", concat(used), packet(want, frame))

	// The fourth chain takes the next frame alone.
	small := ethFrame(60, 8)
	r.backend.deliver(packet(Header{}, small))
	u := r.rx.WaitUsed(1, waitTimeout)
	if u[0].Head != heads[3] {
		t.Errorf("small frame in chain %d, want %d", u[0].Head, heads[3])
	}
	mustEqual(t, "small packet", u[0].Data, packet(Header{NumBuffers: 1}, small))
}

func TestReceiveWithoutMergeDropsWhatDoesNotFit(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, ^uint64(FeatureMrgRxBuf))
	r.backend.deliver(packet(Header{}, ethFrame(2000, 9)))
	small := ethFrame(100, 10)
	r.backend.deliver(packet(Header{}, small))
	head := r.postRx([]uint32{1526})[0]
	u := r.rx.WaitUsed(1, waitTimeout)[0]
	if u.Head != head {
		t.Fatalf("head %d", u.Head)
	}
	mustEqual(t, "frame after the dropped one", u.Data, packet(Header{NumBuffers: 1}, small))
	quiet(t, r.rx, "after the small frame")
	if st := r.dev.Stats(); st.RxDropped != 1 || st.RxFrames != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestReceiveBackpressure(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	for i := range 3 {
		r.backend.deliver(packet(Header{}, ethFrame(200, byte(i))))
	}
	time.Sleep(50 * time.Millisecond)
	if n := r.backend.pending(); n != 3 {
		t.Fatalf("device read %d frames without receive buffers", 3-n)
	}
	if n := r.backend.readCalls(); n != 0 {
		t.Fatalf("device read the backend %d times without receive buffers", n)
	}
	if st := r.dev.Stats(); st.RxNoBuffers == 0 {
		t.Error("back-pressure not counted")
	}
	r.postRx([]uint32{2048}, []uint32{2048}, []uint32{2048})
	used := r.rx.WaitUsed(3, waitTimeout)
	for i, u := range used {
		mustEqual(t, "frame after back-pressure", u.Data, packet(Header{NumBuffers: 1}, ethFrame(200, byte(i))))
	}
	// Idle: the device waits for the backend instead of polling it.
	time.Sleep(50 * time.Millisecond)
	before := r.backend.readCalls()
	time.Sleep(100 * time.Millisecond)
	if after := r.backend.readCalls(); after != before {
		t.Errorf("idle device read the backend %d more times", after-before)
	}
}

func TestReceiveMergedWaitsForBuffers(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	first := r.postRx([]uint32{1024})[0]
	frame := ethFrame(3000, 11)
	r.backend.deliver(packet(Header{}, frame))
	quiet(t, r.rx, "frame larger than the one posted buffer")
	more := r.postRx([]uint32{1024}, []uint32{1024})
	used := r.rx.WaitUsed(3, waitTimeout)
	if used[0].Head != first || used[1].Head != more[0] || used[2].Head != more[1] {
		t.Errorf("heads %d %d %d", used[0].Head, used[1].Head, used[2].Head)
	}
	mustEqual(t, "frame completed later", concat(used), packet(Header{NumBuffers: 3}, frame))
}

func TestReceiveSkipsMalformedChains(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	readOnly := r.rx.AddChain([][]byte{{1, 2, 3}}, nil)
	tooSmall := r.rx.AddChain(nil, []uint32{HeaderSize - 1})
	r.rx.WriteDesc(200, virtiotest.Desc{Addr: r.rx.Alloc(64), Len: 64, Flags: virtiotest.DescWrite | virtiotest.DescNext, Next: 200})
	r.rx.Publish(200)
	good := r.rx.AddChain(nil, []uint32{2048})
	frame := ethFrame(500, 12)
	r.backend.deliver(packet(Header{}, frame))
	r.drv.Notify(RxQueue)
	used := r.rx.WaitUsed(3, waitTimeout)
	if used[0].Head != readOnly || used[0].Len != 0 || used[1].Head != tooSmall || used[1].Len != 0 {
		t.Errorf("bad chains returned as %+v %+v", used[0], used[1])
	}
	if used[2].Head != good {
		t.Fatalf("frame in chain %d, want %d", used[2].Head, good)
	}
	mustEqual(t, "frame after bad chains", used[2].Data, packet(Header{NumBuffers: 1}, frame))
	if st := r.dev.Stats(); st.Malformed != 3 {
		t.Errorf("malformed %d, want 3", st.Malformed)
	}
}

func TestReceiveHonoursDriverOffloads(t *testing.T) {
	noGuestOffloads := ^uint64(FeatureGuestCsum | FeatureGuestTSO4 | FeatureGuestTSO6 | FeatureGuestECN)
	r := newRig(t, Options{}, OffloadFeatures, noGuestOffloads)
	r.backend.mu.Lock()
	set := r.backend.offloads[0]
	r.backend.mu.Unlock()
	if set&(FeatureGuestCsum|FeatureGuestTSO4|FeatureGuestTSO6) != 0 {
		t.Errorf("backend told to deliver offloads the driver refused: %#x", set)
	}
	frame := ethFrame(200, 13)
	r.backend.deliver(packet(Header{Flags: HeaderNeedsCsum, CsumStart: 34, CsumOffset: 16}, frame))
	r.backend.deliver(packet(Header{Flags: HeaderNeedsCsum, GSOType: GSOTCPv4, GSOSize: 100, CsumStart: 34, CsumOffset: 16}, frame))
	r.backend.deliver(packet(Header{Flags: HeaderDataValid}, frame))
	r.postRx([]uint32{2048})
	u := r.rx.WaitUsed(1, waitTimeout)[0]
	// DATA_VALID means nothing to this driver: flags must be zero.
	mustEqual(t, "frame for a driver without GUEST_CSUM", u.Data, packet(Header{NumBuffers: 1}, frame))
	if st := r.dev.Stats(); st.RxDropped != 2 {
		t.Errorf("dropped %d, want 2", st.RxDropped)
	}
}

func TestResetStopsTheDevice(t *testing.T) {
	r := newRig(t, Options{}, OffloadFeatures, 0)
	r.drv.Reset()
	r.backend.deliver(packet(Header{}, ethFrame(100, 14)))
	r.rx.AddChain(nil, []uint32{2048})
	r.drv.Notify(RxQueue)
	r.send(packet(Header{}, ethFrame(100, 15)))
	time.Sleep(50 * time.Millisecond)
	if r.backend.pending() != 1 || len(r.backend.sentFrames()) != 0 {
		t.Fatal("device moved frames after reset")
	}
	// A new driver session works again.
	drv := virtiotest.Init(t, r.mmio, r.mem, virtiotest.Options{})
	drv.Queues[RxQueue].AddChain(nil, []uint32{2048})
	drv.Notify(RxQueue)
	if u := drv.Queues[RxQueue].WaitUsed(1, waitTimeout)[0]; u.Len != HeaderSize+100 {
		t.Errorf("after re-init: used length %d", u.Len)
	}
	if err := r.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if !r.backend.closed {
		t.Error("Close left the backend open")
	}
}

func TestStateRestore(t *testing.T) {
	r := newRig(t, Options{MTU: 1400}, OffloadFeatures, 0)
	r.send(packet(Header{}, ethFrame(64, 16)))
	r.backend.waitSent(1, waitTimeout)
	st := r.dev.State()
	r.drv.Reset()

	other, err := New(newFakeBackend(OffloadFeatures), Options{MAC: [6]byte{0x02, 9, 9, 9, 9, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := other.State(); got != st {
		t.Errorf("restored state %+v, want %+v", got, st)
	}
	if other.Features()&FeatureMTU == 0 {
		t.Error("restored MTU not offered")
	}
	poor, err := New(newFakeBackend(0), Options{MAC: testMAC})
	if err != nil {
		t.Fatal(err)
	}
	if err := poor.Restore(st); err == nil {
		t.Error("restore onto a backend without the negotiated offloads succeeded")
	}
}
