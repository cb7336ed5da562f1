// Command mkinitramfs builds a small guest initramfs: an init program as
// /init (smol's test init or its guest agent), a static busybox for a shell
// and tools, a root account, and an optional /etc/rc that the test init runs
// (without one, it starts an interactive shell on the console).
//
//	mkinitramfs -o build/initramfs.cpio -init build/init -rc guest/demo/rc
//	mkinitramfs -o build/agent.cpio -init build/agent
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/smolvm/smol/guest/initramfs"
)

func main() {
	out := flag.String("o", "", "output cpio file")
	initPath := flag.String("init", "", "the init binary (guest/init, built static)")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox")
	rc := flag.String("rc", "", "optional shell script installed as /etc/rc")
	flag.Parse()
	if *out == "" || *initPath == "" {
		fmt.Fprintln(os.Stderr, "usage: mkinitramfs -o OUT -init INIT [-busybox PATH] [-rc SCRIPT]")
		os.Exit(2)
	}
	a := initramfs.New()
	if err := a.AddHostFile("init", *initPath); err != nil {
		fail(err)
	}
	if err := a.AddBusybox(*busybox, initramfs.BusyboxApplets...); err != nil {
		fail(err)
	}
	// A root user and group, so that programs (and the agent's user
	// lookup) find the account they run as.
	a.AddFile("etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644)
	a.AddDir("root", 0o700)
	a.AddFile("etc/group", []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	if *rc != "" {
		if err := a.AddHostFile("etc/rc", *rc); err != nil {
			fail(err)
		}
	}
	if err := a.WriteFile(*out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "mkinitramfs: %v\n", err)
	os.Exit(1)
}
