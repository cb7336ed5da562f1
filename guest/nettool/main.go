// Command nettool is a small static program for test and benchmark guests:
// echo servers and echo clients that check what comes back, over vsock and
// TCP, and throughput measurements of the guest's block, network and vsock
// devices. Busybox has no vsock support, its nc cannot check a round trip,
// and its dd can neither keep several requests in flight nor stop after a
// time.
//
//	nettool serve PORT                 echo every vsock connection on PORT until killed
//	nettool echo CID PORT BYTES [N]    N concurrent vsock connections to CID:PORT, each
//	                                   sending BYTES and checking the echo
//	nettool tcp-echo ADDR BYTES [N]    the same over TCP to ADDR (host:port)
//	nettool disk DEV SECONDS [QD]      sequential write, sequential read (O_DIRECT, 1 MiB)
//	                                   and 4 KiB random reads (O_DIRECT, QD in flight,
//	                                   default 8) on DEV, each for SECONDS
//	nettool tcp-send ADDR SECONDS      stream to ADDR for SECONDS, half-close, wait for
//	                                   the peer to close; print the rate
//	nettool tcp-recv ADDR SECONDS      read what ADDR streams for SECONDS; print the rate
//	nettool vsock-send CID PORT SECONDS, nettool vsock-recv CID PORT SECONDS
//	                                   the same over vsock
//	nettool tcp-connect ADDR SECONDS   connect to ADDR and close, over and over, for SECONDS;
//	                                   print the rate
//	nettool resolve NAME [SERVER]      print NAME's addresses (asking SERVER host:port if given)
//	nettool get URL                    print the body of an HTTP or HTTPS GET
//	nettool dial ADDR                  TCP connect to ADDR; print how long it took
//	nettool udp-echo ADDR N            send N datagrams to ADDR and check the echoes
//	nettool cursor X0 Y0 X1 Y1 SECONDS show the display's cursor at X0,Y0, move it to
//	                                   X1,Y1 and hold it there for SECONDS (DRM)
//	nettool fb-rate SECONDS            full-screen updates of the display (DRM DIRTYFB) a second
//	nettool keys NAME N                print the codes of the first N key presses on the
//	                                   input device called NAME ("smol keyboard")
//
// Measurements print one line each, "nettool-result NAME VALUE UNIT" (MB
// is 10^6 bytes), for a benchmark reading the console; a failed measurement
// prints "nettool: ..." and makes the exit status 1.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/smolvm/smol/guest/vsockdial"
)

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	args := os.Args[2:]
	need := func(n int) {
		if len(args) < n {
			usage()
		}
	}
	switch os.Args[1] {
	case "serve":
		serve(atoi(args[0]))
	case "echo":
		need(3)
		cid, port := uint32(atoi(args[0])), uint32(atoi(args[1]))
		echo(func() (io.ReadWriteCloser, error) { return dialVsock(cid, port) }, atoi(args[2]), optionalCount(5))
	case "tcp-echo":
		need(2)
		addr := args[0]
		echo(func() (io.ReadWriteCloser, error) { return net.Dial("tcp", addr) }, atoi(args[1]), optionalCount(4))
	case "disk":
		need(2)
		qd := 8
		if len(args) > 2 {
			qd = atoi(args[2])
		}
		check(diskBench(args[0], seconds(args[1]), qd))
	case "fb-rate":
		need(1)
		check(fbRate(seconds(args[0])))
	case "keys":
		need(2)
		check(keys(args[0], atoi(args[1])))
	case "cursor":
		need(5)
		check(cursor(int32(atoi(args[0])), int32(atoi(args[1])), int32(atoi(args[2])), int32(atoi(args[3])), time.Duration(seconds(args[4])*float64(time.Second))))
	case "fs":
		need(2)
		check(fsBench(args[0], atoi(args[1])))
	case "tcp-send", "tcp-recv":
		need(2)
		addr := args[0]
		dial := func() (streamConn, error) { return dialTCP(addr) }
		check(streamBench(os.Args[1], dial, os.Args[1] == "tcp-send", seconds(args[1])))
	case "vsock-send", "vsock-recv":
		need(3)
		cid, port := uint32(atoi(args[0])), uint32(atoi(args[1]))
		dial := func() (streamConn, error) { return dialVsockStream(cid, port) }
		check(streamBench(os.Args[1], dial, os.Args[1] == "vsock-send", seconds(args[2])))
	case "tcp-connect":
		need(2)
		check(connectBench(args[0], seconds(args[1])))
	case "resolve":
		server := ""
		if len(args) > 1 {
			server = args[1]
		}
		check(resolve(args[0], server))
	case "get":
		check(get(args[0]))
	case "dial":
		check(dial(args[0]))
	case "udp-echo":
		need(2)
		check(udpEcho(args[0], atoi(args[1])))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: nettool serve PORT | echo CID PORT BYTES [CONNS] | tcp-echo ADDR BYTES [CONNS]
       nettool disk DEV SECONDS [QD] | tcp-send|tcp-recv ADDR SECONDS | vsock-send|vsock-recv CID PORT SECONDS`)
	os.Exit(2)
}

func optionalCount(i int) int {
	if len(os.Args) > i {
		return atoi(os.Args[i])
	}
	return 1
}

// dialVsock connects to port on cid, waiting up to vsockConnectWait for
// the answer (vsockdial says why not Linux's 2 s).
func dialVsock(cid, port uint32) (io.ReadWriteCloser, error) {
	fd, err := vsockdial.Connect(cid, port, vsockConnectWait)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "vsock"), nil
}

// vsockConnectWait is how long nettool waits for a vsock peer's answer.
const vsockConnectWait = 30 * time.Second

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "nettool: %q is not a count\n", s)
		os.Exit(2)
	}
	return n
}

// seconds parses a positive duration in seconds ("3", "0.5").
func seconds(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0 && v < 3600) {
		fmt.Fprintf(os.Stderr, "nettool: %q is not a duration in seconds\n", s)
		os.Exit(2)
	}
	return v
}

// resultOut receives the measurements; tests replace it.
var resultOut io.Writer = os.Stdout

// result prints one measurement in the form benchmarks parse.
func result(name string, value float64, unit string) {
	fmt.Fprintf(resultOut, "nettool-result %s %.1f %s\n", name, value, unit)
}

func check(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettool: %v\n", err)
		os.Exit(1)
	}
}
