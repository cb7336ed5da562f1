// Package agent is the protocol between smol and the agent that runs as
// PID 1 inside a guest (guest/agent), and the host side of it.
//
// One vsock stream carries one command. The host sends a Start frame (what
// to run and how), then stdin data, window sizes and signals; the guest
// sends stdout and stderr data as it comes and, last, an Exit frame with
// the status. Every frame is a type byte, a big-endian 32-bit length and
// that many bytes; lengths are bounded (MaxFrame) because either side may
// be hostile to the other.
//
// The agent opens the first stream itself, to host port BootPort, as soon
// as the guest's root filesystem is ready: the host learns that the guest
// is up without polling, and the command that the VM exists for starts at
// once. Further commands reach the agent on ExecPort, opened by the host.
package agent

// Vsock ports. BootPort is on the host (CID 2); ExecPort is in the guest.
const (
	BootPort = 1024
	ExecPort = 1025
)
