package ninep_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hugelgupf/p9/p9"
	vt "github.com/smolvm/smol/virtio/virtiotest"
)

// ringConn is a 9P client's connection through the device's virtqueue, as
// a guest's transport makes it: each T-message becomes one chain (the
// message in its readable buffers, room for the reply in writable ones
// cut at random points, the first often 11 bytes as Linux's zero-copy
// reads and readdirs cut them), and each used chain's bytes are the
// client's next R-message. One goroutine owns the driver's queue.
type ringConn struct {
	out     chan []byte // whole T-messages, from the client
	partial []byte      // a T-message the client is still writing
	replies *io.PipeReader
	feed    *io.PipeWriter
	done    chan struct{}
	once    sync.Once
	failed  chan error    // the driver loop's complaint, if any
	stopped chan struct{} // the driver loop has returned
}

func newRingConn(d *vt.Driver, room uint32, seed uint64) *ringConn {
	r, w := io.Pipe()
	c := &ringConn{out: make(chan []byte, 64), replies: r, feed: w, done: make(chan struct{}), failed: make(chan error, 1), stopped: make(chan struct{})}
	go c.drive(d, room, rand.New(rand.NewPCG(seed, 7)))
	return c
}

// drive adds the client's requests to the queue and hands back replies,
// checking each against the tag of the chain it came back in.
func (c *ringConn) drive(d *vt.Driver, room uint32, r *rand.Rand) {
	defer close(c.stopped)
	q := d.Queues[0]
	tags := map[uint16]uint16{} // chain head → its request's tag
	fail := func(err error) {
		c.failed <- err
		c.feed.CloseWithError(err)
	}
	for {
		select {
		case <-c.done:
			return
		case m := <-c.out:
			lens := splitLen(r, room)
			if r.IntN(2) == 0 && room > 11 {
				lens = append([]uint32{11}, splitLen(r, room-11)...)
			}
			var head uint16
			if r.IntN(2) == 0 {
				head = q.AddIndirectChain(split(r, m), lens)
			} else {
				head = q.AddChain(split(r, m), lens)
			}
			tags[head] = binary.LittleEndian.Uint16(m[5:])
			d.Notify(0)
		case <-time.After(20 * time.Microsecond):
		}
		for _, u := range q.Used() {
			tag, ok := tags[u.Head]
			delete(tags, u.Head)
			switch {
			case !ok:
				fail(fmt.Errorf("chain %d came back, not in flight", u.Head))
				return
			case u.Len < 7 || binary.LittleEndian.Uint32(u.Data) != u.Len:
				fail(fmt.Errorf("chain %d (tag %d) came back with %d bytes: % x", u.Head, tag, u.Len, u.Data[:min(len(u.Data), 16)]))
				return
			case binary.LittleEndian.Uint16(u.Data[5:]) != tag:
				fail(fmt.Errorf("chain %d (tag %d) came back holding tag %d's reply", u.Head, tag, binary.LittleEndian.Uint16(u.Data[5:])))
				return
			}
			if _, err := c.feed.Write(u.Data); err != nil {
				return
			}
		}
	}
}

// Write takes the client's bytes and queues each whole T-message.
func (c *ringConn) Write(p []byte) (int, error) {
	c.partial = append(c.partial, p...)
	for len(c.partial) >= 7 {
		size := int(binary.LittleEndian.Uint32(c.partial))
		if len(c.partial) < size {
			break
		}
		select {
		case c.out <- bytes.Clone(c.partial[:size]):
		case <-c.done:
			return 0, io.ErrClosedPipe
		}
		c.partial = c.partial[size:]
	}
	return len(p), nil
}

func (c *ringConn) Read(p []byte) (int, error) { return c.replies.Read(p) }

// Close ends the driver loop and waits for it: the queue's memory is not
// touched after Close returns.
func (c *ringConn) Close() error {
	c.once.Do(func() { close(c.done) })
	c.replies.Close()
	<-c.stopped
	return nil
}

// TestClientWalksATree: a 9P2000.L client (hugelgupf/p9's, not ours)
// talking through the queue lists a tree of 2,000 files in 40
// directories from four goroutines at once, stats every entry and reads
// every file back, as `find` and `cat` in a guest do: every name, size
// and byte arrives, and no request is left unanswered.
func TestClientWalksATree(t *testing.T) {
	const (
		dirs    = 40
		perDir  = 50
		msize   = 64 << 10
		workers = 4
	)
	root := t.TempDir()
	want := map[string][]byte{}
	for i := range dirs {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range perDir {
			name := fmt.Sprintf("d%02d/file-with-a-longish-name-%04d", i, j)
			data := bytes.Repeat([]byte{byte(i), byte(j)}, (i*perDir+j)%3000)
			if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
			want[name] = data
		}
	}
	d := startDevice(t, root, 32<<20)

	conn := newRingConn(d, msize, 3)
	defer conn.Close()
	client, err := p9.NewClient(conn, p9.WithMessageSize(msize))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	top, err := client.Attach("")
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string][]byte{}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				for i := w; i < dirs; i += workers {
					dirName := fmt.Sprintf("d%02d", i)
					names, err := listDir(top, dirName)
					if err != nil {
						return err
					}
					for _, name := range names {
						data, err := readFile(top, dirName, name)
						if err != nil {
							return fmt.Errorf("%s/%s: %w", dirName, name, err)
						}
						mu.Lock()
						got[dirName+"/"+name] = data
						mu.Unlock()
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case err := <-conn.failed:
			t.Fatal(err)
		case <-time.After(2 * time.Minute):
			t.Fatal("the walk did not finish in 2 minutes: a request went unanswered")
		}
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d files, want %d", len(got), len(want))
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Fatalf("%s: read %d bytes, want %d", name, len(got[name]), len(data))
		}
	}
}

// listDir reads a directory to its end, as getdents does.
func listDir(top p9.File, dir string) ([]string, error) {
	_, f, err := top.Walk([]string{dir})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		return nil, err
	}
	var names []string
	offset := uint64(0)
	for {
		ents, err := f.Readdir(offset, 4096)
		if err != nil {
			return nil, err
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if e.Name != "." && e.Name != ".." {
				names = append(names, e.Name)
			}
			offset = e.Offset
		}
	}
	slices.Sort(names)
	return names, nil
}

// readFile stats and reads one file, checking the size it reports.
func readFile(top p9.File, dir, name string) ([]byte, error) {
	_, f, _, attr, err := top.WalkGetAttr([]string{dir, name})
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, _, err := f.Open(p9.ReadOnly); err != nil {
		return nil, err
	}
	data := make([]byte, attr.Size+1)
	n, err := f.ReadAt(data, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if uint64(n) != attr.Size {
		return nil, fmt.Errorf("read %d bytes of a file of %d", n, attr.Size)
	}
	return data[:n], nil
}
