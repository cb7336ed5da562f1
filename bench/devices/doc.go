// Command devices compares smol's virtio devices with QEMU microvm's
// virtio-mmio devices: block throughput and IOPS, a shared host directory
// (virtio-9p: sequential write and read of a file, a walk of 10,000 files;
// QEMU's -fsdev local with security_model=none), TCP throughput over a
// TAP in both directions, and vsock throughput in both directions. Both VMMs
// boot the same kernel and initramfs with the same memory and vCPUs, in one
// session, alternating rounds; the guest runs build/nettool and prints its
// measurements on the console. For each figure it prints
//
//	blk seq-read: smol <v> MB/s, qemu-microvm <v> MB/s, ratio <smol/qemu>
//
// and ends with a summary. Every rate is measured inside the guest, the
// same way for both VMMs.
//
// The peers are chosen to be comparable: QEMU's disk is a raw file with
// cache=writeback (the image lives on tmpfs, which has no O_DIRECT) and its
// network device uses the userspace virtio-net backend (vhost=off), as smol
// does. QEMU also gets smol's default entropy and balloon devices (free
// page reporting on), which run beside the measured ones in every smol
// guest. QEMU has no userspace vsock, so the vsock figures compare smol's
// userspace device with the kernel's vhost-vsock, reached from host
// AF_VSOCK sockets; that peer is a different design and the output says so.
// Before every guest the bench writes and frees 256 MiB of tmpfs
// (-settle-mib, package settle), as bench/boot does: in the test box how
// fast a VM runs depends on what the VM before it left in memory.
//
// It needs root (TAP devices, /dev/vhost-vsock) and a /dev/kvm that boots
// Linux; on this project's machines that is the test box: make bench-devices.
package main
