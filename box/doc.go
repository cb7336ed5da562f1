// Package box runs commands inside the test box: a nested virtual machine
// that gives its userland real (hardware-semantics) KVM on hosts whose own
// /dev/kvm cannot boot Linux.
//
// The machines this project is developed on expose a PVM /dev/kvm (software
// KVM without VMX/SVM, see shared/ENVIRONMENT.md). The box is QEMU running
// under its software CPU with AMD SVM emulated, booting the project's box
// kernel (built from the guest kernel's source with KVM and 9p built in).
// The host's whole root filesystem is shared into the box over virtio-9p and
// the box's init chroots into it, so a command sees the same paths, the same
// checkout and the same binaries as on the host, and what it writes stays
// there. /proc, /sys and /dev inside are the box's own, so /dev/kvm is the
// box kernel's KVM. TMPDIR inside is /dev/shm, the box's own tmpfs, because
// Unix sockets cannot be created on the host files seen over 9p; what a
// command leaves there is gone when the box ends.
//
// A box can crash (its own kernel dies: ErrBoxCrashed) or hang. Against
// hangs, its init sends heartbeats over a virtio-serial port, one from the
// box kernel and one through its 9p share, and a watchdog ends a box that
// has sent neither heartbeat nor console output, or whose share has not
// answered, for SMOLBOX_WATCHDOG (120 s): ErrBoxHung, with the box's last
// console lines and where QEMU says its vCPUs are (life.go, qmp.go). A
// silent command is not a hung box. SMOLBOX_TIMEOUT bounds a whole
// command (ErrTimeout).
//
// On a host whose /dev/kvm boots Linux, the box steps aside: Main runs the
// tests directly.
//
// Time inside the box is 10-50x slower than hardware and noisy; compare
// ratios between programs run in one box session, never absolute times.
package box
