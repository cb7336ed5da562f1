package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/smolvm/smol"
	"github.com/smolvm/smol/imagefs"
	"golang.org/x/sys/unix"
)

// workload is `smol run` with an image or a command: the guest agent runs
// the command and smol exits with its status.
type workload struct {
	image       string
	pack        string // a stub's run: its pack instead of an image
	pull        string
	insecure    bool
	env         []string
	workdir     string
	user        string
	interactive bool
	tty         bool
	args        []string
	cfg         smol.Config
}

// run pulls or finds the image, runs the command and returns its status.
func (w *workload) run() (int, error) {
	policy, err := imagefs.ParsePullPolicy(w.pull)
	if err != nil {
		return 0, usageError{"--pull: " + err.Error()}
	}
	env, err := expandEnv(w.env)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var image *imagefs.Image
	if w.image != "" {
		store, err := imagefs.Open(imagefs.DefaultHome())
		if err != nil {
			return 0, err
		}
		image, err = store.Get(ctx, w.image, imagefs.Options{Pull: policy, Insecure: w.insecure, Progress: progressWriter()})
		if err != nil {
			return 0, err
		}
	}

	cmd := smol.Command{Env: env, Dir: w.workdir, User: w.user}
	if len(w.args) > 0 {
		cmd.Args = w.args
	}
	defer attach(&cmd, w.interactive, w.tty)()
	if w.pack != "" {
		return commandResult(smol.RunPacked(ctx, w.pack, w.cfg, cmd))
	}
	return commandResult(smol.RunCommand(ctx, w.cfg, image, cmd))
}

// attach connects a command to this process's terminal: stdout and
// stderr, stdin with -i, a terminal of this one's size with -t (raw mode
// while it runs), and forwarded signals and resizes. The returned func
// undoes it.
func attach(cmd *smol.Command, interactive, tty bool) func() {
	cmd.Stdout, cmd.Stderr, cmd.TTY = os.Stdout, os.Stderr, tty
	if tty {
		if ws, err := unix.IoctlGetWinsize(int(os.Stdout.Fd()), unix.TIOCGWINSZ); err == nil {
			cmd.Rows, cmd.Cols = ws.Row, ws.Col
		}
	}
	restore := func() {}
	if interactive {
		cmd.Stdin = os.Stdin
		if tty {
			if saved, ok := makeRaw(int(os.Stdin.Fd())); ok {
				restore = func() { unix.IoctlSetTermios(int(os.Stdin.Fd()), unix.TCSETS, saved) }
			}
		}
	}
	signals, resize, stop := forwardSignals()
	cmd.Signals, cmd.Resize = signals, resize
	return func() { stop(); restore() }
}

// commandResult turns a command's outcome into smol's exit status: a
// command that could not start is one line on stderr and its 126/127.
func commandResult(code int, err error) (int, error) {
	var ce *smol.CommandError
	if errors.As(err, &ce) {
		fmt.Fprintf(os.Stderr, "smol: %s\n", ce.Error()) // Error escapes the guest's text; Msg is raw
		return ce.Code, nil
	}
	return code, err
}

// forwardSignals relays the signals a user sends smol (Ctrl-C, kill) to the
// command, and terminal size changes as resizes.
func forwardSignals() (<-chan syscall.Signal, <-chan smol.Winsize, func()) {
	incoming := make(chan os.Signal, 8)
	signal.Notify(incoming, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH)
	signals := make(chan syscall.Signal, 8)
	resize := make(chan smol.Winsize, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-incoming:
				sig := s.(syscall.Signal)
				if sig == unix.SIGWINCH {
					if ws, err := unix.IoctlGetWinsize(int(os.Stdout.Fd()), unix.TIOCGWINSZ); err == nil {
						select {
						case resize <- smol.Winsize{Rows: ws.Row, Cols: ws.Col}:
						default:
						}
					}
					continue
				}
				select {
				case signals <- sig:
				default:
				}
			}
		}
	}()
	return signals, resize, func() { signal.Stop(incoming); close(done) }
}

// expandEnv reads -e values: KEY=VALUE, or KEY alone for the host's value.
func expandEnv(values []string) ([]string, error) {
	var env []string
	for _, v := range values {
		key, _, hasValue := strings.Cut(v, "=")
		if key == "" {
			return nil, usageError{fmt.Sprintf("-e %q: want KEY=VALUE or KEY", v)}
		}
		if hasValue {
			env = append(env, v)
		} else if hostValue, ok := os.LookupEnv(key); ok {
			env = append(env, key+"="+hostValue)
		}
	}
	return env, nil
}

// progressWriter is where pulls report progress: the terminal, or nowhere.
func progressWriter() io.Writer {
	if isTerminal(int(os.Stderr.Fd())) {
		return os.Stderr
	}
	return nil
}
