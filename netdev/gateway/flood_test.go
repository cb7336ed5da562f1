package gateway

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestFloodStaysBounded: a guest opening 10,000 connections and sending a
// storm of DNS queries gets at most Limits.TCPFlows connections, the rest
// refused at once; a connection opened before the flood keeps working
// through it; memory stays bounded; and once the flood is gone new
// connections work again.
func TestFloodStaysBounded(t *testing.T) {
	const flood = 10000
	limits := Limits{TCPFlows: 256, DNSInFlight: 16}
	r := newRig(t, nil, testRecords, limits)
	r.hosts.add("tcp", "198.51.100.1:7", echoTCP(t))

	before := heapInUse()
	keeper, err := r.dial(ctxT(t), "198.51.100.1:7")
	if err != nil {
		t.Fatal(err)
	}
	defer keeper.Close()
	ping := func() error {
		keeper.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := keeper.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err := io.ReadFull(keeper, buf)
		return err
	}

	var opened, refused atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // the guest's own concurrency
	for i := 0; i < flood; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := r.dial(ctx, "198.51.100.1:7")
			if err != nil {
				refused.Add(1)
				return
			}
			opened.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}()
		if i == flood/2 {
			// A DNS storm in the middle of it.
			for j := 0; j < 500; j++ {
				go r.lookup("10.0.2.2:53", "allowed.test", dns.TypeA)
			}
			if err := ping(); err != nil {
				t.Errorf("the open connection during the flood: %v", err)
			}
		}
	}
	wg.Wait()
	if got := opened.Load(); got > int64(limits.TCPFlows) {
		t.Errorf("%d connections were let through, the limit is %d", got, limits.TCPFlows)
	}
	if refused.Load() < flood-int64(limits.TCPFlows) {
		t.Errorf("only %d of %d refused", refused.Load(), flood)
	}
	if err := ping(); err != nil {
		t.Errorf("the open connection after the flood: %v", err)
	}
	if after := heapInUse(); after > before && after-before > 256<<20 {
		t.Errorf("heap grew by %d MiB under the flood", (after-before)>>20)
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := r.dial(ctxT(t), "198.51.100.1:7")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection after the flood: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d opened, %d refused", opened.Load(), refused.Load())
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
