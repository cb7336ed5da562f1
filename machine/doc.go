// Package machine keeps named, long-lived VMs on disk and speaks the
// control API of the VMM process that runs each one: the records under
// $SMOL_HOME/machines/NAME, their state, and the API's client and server.
//
// # Processes
//
// A started machine is one VMM process of its own (the smol binary
// re-executed in a hidden mode, in its own session), detached from the
// command that started it. The CLI, the Go API and later the containerd
// shim are clients of its control socket; none of them reaches into the
// VMM. The VMM side (booting the VM, relaying exec streams to the guest
// agent) lives in the smol package, which implements this package's
// Backend.
//
// # Files of a machine
//
//	NAME/config.json    the Spec, written once at create (atomically)
//	NAME/state.json     what the VMM last said: running, stopped, failed (atomically replaced)
//	NAME/vmm.lock       write lock held by the VMM for its whole life: the one truth of "alive"
//	NAME/start.lock     write lock held while a start (or a remove) is in progress: one wins
//	NAME/storage.ext4   the writable layer that persists (sparse, ext4)
//	NAME/console.log    the guest console and agent log, bounded (plus console.log.1)
//	NAME/vmm.log        the VMM process's own errors
//
// The sockets live apart, in the user's runtime directory
// ($XDG_RUNTIME_DIR, else /tmp/smol-UID), under smol/<hash of the store's
// path>/NAME/: control.sock (the control API, HTTP/JSON) and vsock.sock
// (the guest's vsock device, the VMM's own use). SMOL_HOME may be on a
// filesystem that holds no sockets, or too deep for a socket's path.
//
// Because liveness is a lock the kernel drops when the process dies, a
// VMM killed with SIGKILL leaves no pid file or socket that could block
// the next start: the machine reads as failed, with its last console
// lines, and starts again.
package machine
