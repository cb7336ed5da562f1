package smol

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/smolvm/smol/internal/syncbuf"
)

// A hostile guest agent's error string must not reach the terminal with its
// escape sequences intact: Error escapes what Msg keeps raw.
func TestCommandErrorEscapesGuestText(t *testing.T) {
	msg := "exec: \"x\x1b[2J\x1b[H\": executable file not found\nsmol: all good"
	err := &CommandError{Code: 127, Msg: msg}
	got := err.Error()
	if strings.ContainsAny(got, "\x1b\n") {
		t.Fatalf("Error() = %q: control bytes survived", got)
	}
	if want := `exec: "x\x1b[2J\x1b[H": executable file not found\nsmol: all good`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if err.Msg != msg {
		t.Fatal("Msg changed: it must stay the guest's text as sent")
	}
	plain := &CommandError{Code: 127, Msg: `exec: "nope": executable file not found in $PATH`}
	if plain.Error() != plain.Msg {
		t.Fatalf("ordinary message altered: %q", plain.Error())
	}
}

func TestConsoleTailInErrorIsEscaped(t *testing.T) {
	console := syncbuf.NewTail(1 << 10)
	console.Write([]byte("[    0.1] Linux version\r\n\x1b[2J\x1b]0;pwned\x07Kernel panic\r\n"))
	base := errors.New("the VM ended before its agent started")
	err := withConsoleTail(base, console)
	if !errors.Is(err, base) {
		t.Fatal("the cause is lost")
	}
	want := "the VM ended before its agent started; guest console ends with:\n" +
		"[    0.1] Linux version\n" + `\x1b[2J\x1b]0;pwned\aKernel panic` + "\n"
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err.Error(), want)
	}
	if withConsoleTail(base, nil) != base || withConsoleTail(base, syncbuf.NewTail(10)) != base {
		t.Fatal("no console, or an empty one, must leave the error alone")
	}
}

// A session whose VM stopped ends: bytes already passed on are still
// read, then reads fail instead of waiting for an agent that is gone;
// a session that ended first is left alone.
func TestHangUpWhenStopped(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	stopped := make(chan struct{})
	over := hangUpWhenStopped(host, stopped)
	defer over()
	go guest.Write([]byte("last words"))
	close(stopped)
	buf := make([]byte, 64)
	n, err := host.Read(buf)
	if err != nil || string(buf[:n]) != "last words" {
		t.Fatalf("read %q, %v: what the guest sent before it stopped is lost", buf[:n], err)
	}
	begin := time.Now()
	if _, err := host.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the VM stopped: %v, want the deadline", err)
	}
	if waited := time.Since(begin); waited > agentDrainTime+time.Second {
		t.Fatalf("the session ended %v after the VM stopped", waited)
	}

	host2, guest2 := net.Pipe()
	defer guest2.Close()
	stopped2 := make(chan struct{})
	hangUpWhenStopped(host2, stopped2)()
	close(stopped2)
	go guest2.Write([]byte("x"))
	time.Sleep(agentDrainTime + 200*time.Millisecond)
	if _, err := host2.Read(buf); err != nil {
		t.Fatalf("a session that was over before the VM stopped was cut: %v", err)
	}
}
