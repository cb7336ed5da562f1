package pvpanic

import "testing"

func TestPanicIsReportedOnce(t *testing.T) {
	panics := 0
	d := New(func() { panics++ })
	b := make([]byte, 1)
	d.Read(0, b)
	if b[0] != Panicked|CrashLoaded {
		t.Fatalf("capabilities = %#x", b[0])
	}
	d.Write(0, []byte{CrashLoaded})
	if panics != 0 || d.Events() != CrashLoaded {
		t.Fatalf("crash-loaded: panics %d, events %#x", panics, d.Events())
	}
	d.Write(0, []byte{Panicked | 0xf0}) // unknown bits ignored
	if panics != 1 || d.Events() != Panicked|CrashLoaded {
		t.Fatalf("panicked: panics %d, events %#x", panics, d.Events())
	}
	d.Write(1, []byte{Panicked}) // not our port
	d.Write(0, nil)
	if panics != 1 {
		t.Fatalf("stray writes reported a panic")
	}
	r := New(nil)
	r.Restore(d.State())
	if r.Events() != d.Events() {
		t.Fatal("state round trip lost events")
	}
}
