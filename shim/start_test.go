package shim

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/events"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/containerd/runtime"
	taskapi "github.com/containerd/containerd/runtime/v2/task"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// recordingPublisher keeps the topics a service publishes, in order.
type recordingPublisher struct {
	mu     sync.Mutex
	topics []string
}

func (r *recordingPublisher) Publish(ctx context.Context, topic string, event events.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topics = append(r.topics, topic)
	return nil
}

func (r *recordingPublisher) Close() error { return nil }

func (r *recordingPublisher) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.topics...)
}

// sandboxWithoutMachine is a service holding one pod sandbox whose
// machine is gone: its placeholder's Start answers at once and the
// process ends at once (status 255), the quickest end a start can race.
func sandboxWithoutMachine() (*service, *recordingPublisher) {
	pub := &recordingPublisher{}
	s := &service{ctx: namespaces.WithNamespace(context.Background(), "test"), id: "pod", publisher: pub,
		containers: map[string]*container{}}
	c := &container{id: "pod", sandbox: true, execs: map[string]*process{}}
	c.init = newProcess("pod", "", guestRoot{}, &specs.Process{Args: []string{"pause"}}, "", "", "", false)
	s.containers["pod"] = c
	return s, pub
}

// TestStartEventComesBeforeTheExit: a process that ends the moment it
// starts has its TaskStart published before its TaskExit, every time.
func TestStartEventComesBeforeTheExit(t *testing.T) {
	for i := 0; i < 200; i++ {
		s, pub := sandboxWithoutMachine()
		if _, err := s.Start(context.Background(), &taskapi.StartRequest{ID: "pod"}); err != nil {
			t.Fatal(err)
		}
		<-s.containers["pod"].init.done
		want := []string{runtime.TaskStartEventTopic, runtime.TaskExitEventTopic}
		deadline := time.Now().Add(5 * time.Second) // the exit is published just after done
		got := pub.seen()
		for len(got) < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			got = pub.seen()
		}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("round %d: events %q, want %q", i, got, want)
		}
	}
}

// TestOneStartPerProcess: of two Starts of one process at once, one runs
// it and the other is refused; a third, later, is refused too.
func TestOneStartPerProcess(t *testing.T) {
	s, _ := sandboxWithoutMachine()
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := s.Start(context.Background(), &taskapi.StartRequest{ID: "pod"})
			errs <- err
		}()
	}
	var refused int
	for i := 0; i < 2; i++ {
		if err := <-errs; errors.Is(err, errdefs.ErrFailedPrecondition) {
			refused++
		} else if err != nil {
			t.Errorf("start: %v", err)
		}
	}
	if refused != 1 {
		t.Errorf("%d of two concurrent Starts refused, want 1", refused)
	}
	<-s.containers["pod"].init.done
	if _, err := s.Start(context.Background(), &taskapi.StartRequest{ID: "pod"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a Start of an ended process: %v, want refused", err)
	}
}
