// Command smolbox runs a shell command inside the test box, the nested VM
// that provides real KVM on hosts whose /dev/kvm cannot boot Linux:
//
//	smolbox 'bin/smol run --kernel build/vmlinux'
//
// The command runs in the current directory with the current environment;
// its output is shown and smolbox exits with its status. `make box RUN=...`
// is the usual way in.
package main

import (
	"context"
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
		fmt.Fprintf(os.Stderr, "smolbox: %v\n", err)
		os.Exit(125)
	}
	os.Exit(code)
}
