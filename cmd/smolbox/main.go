// Command smolbox runs a shell command inside the test box, the nested VM
// that provides real KVM on hosts whose /dev/kvm cannot boot Linux:
//
//	smolbox 'bin/smol run --kernel build/vmlinux'
//
// The command runs in the current directory with the current environment;
// its output is shown and smolbox exits with its status. `make box RUN=...`
// is the usual way in.
//
// A box that fails says so on stderr, in one report that starts with
// "box:", and smolbox exits with 124 when the command outlived
// SMOLBOX_TIMEOUT (as timeout(1) does) and 125 for every other failure of
// the box itself (it crashed, hung, or could not start), so that a
// script can tell them from the command's own statuses.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/smolvm/smol/box"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: smolbox 'SHELL COMMAND'")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := box.Run(ctx, strings.Join(os.Args[1:], " "), box.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "box: %v\n", err)
		if errors.Is(err, box.ErrTimeout) {
			os.Exit(124)
		}
		os.Exit(125)
	}
	os.Exit(code)
}
