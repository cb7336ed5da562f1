// Package shim is containerd's runtime v2 task service backed by smol
// machines (cmd/containerd-shim-smol-v2). One shim process serves a group
// of containers, a pod sandbox and its containers or a lone container,
// and runs one machine for the group: each container's root filesystem
// (the snapshotter's mounts) is mounted on the host in a directory the
// machine shares (virtio-9p), and the container's processes are the
// guest agent's commands chrooted in their root there. containerd's
// FIFOs carry their stdio; exit statuses and the task events go back to
// containerd as the runc shim sends them.
package shim
