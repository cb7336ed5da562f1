// Package virgl gives a virtio-gpu device 3D (OpenGL through the virgl
// protocol) by running virglrenderer in a separate, sandboxed helper
// process, smol-gpu, and forwarding the guest's 3D commands to it.
//
// Why a helper process: virglrenderer is C, links Mesa and LLVM, and
// parses a command stream the guest writes (shaders included). A bug in
// any of that must not be a bug in the VMM, which holds the guest's RAM,
// its disks and the KVM file descriptors. So the VMM stays pure Go
// (CGO_ENABLED=0) and the helper, the only cgo binary, gets only what
// rendering needs:
//
//   - guest RAM, as the memfd the VMM maps (fd 4), which it maps shared:
//     the guest's resource backings are read and written in place;
//   - one Unix stream socket (fd 3) to the VMM, over which it receives
//     commands and sends answers (wire.go);
//   - nothing else. It starts in its own user, mount, network, IPC, UTS
//     and PID namespaces (no network at all, no view of the VMM's
//     processes); once virglrenderer and Mesa are loaded it puts an empty
//     read-only tmpfs at its root (no host file is reachable any more)
//     and installs a seccomp filter that refuses exec, mount, chroot,
//     new namespaces, sockets, ptrace and the other calls a renderer has
//     no business making (cmd/smol-gpu).
//
// The protocol is synchronous: the device's worker sends one command and
// waits for its answer, and the helper answers a fenced command only once
// the renderer has signalled the fence. That keeps the device's fence
// handling what it is for 2D (a response is the fence) at the cost of
// overlapping rendering with the next command.
//
// A helper that dies, hangs past the command timeout or answers nonsense
// is killed and marked gone: every later 3D command is answered with an
// error, the guest's GPU is broken, and the VMM and the machine run on.
package virgl
