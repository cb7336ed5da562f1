//go:build cgo

package main

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// confine takes the file system and the dangerous system calls away. The
// VMM started the helper in its own user, mount, network, IPC, UTS and
// PID namespaces (package devices/gpu/virgl), so the mount below touches
// only the helper's own view.
//
//  1. The root becomes an empty, read-only tmpfs: no host file can be
//     opened again (Mesa and LLVM are loaded by now; the shader cache is
//     off).
//  2. A seccomp filter, on every thread, refuses what could undo that or
//     reach further: exec, mount and friends, chroot, pivot_root,
//     unshare, setns and clone into new namespaces, ptrace and
//     process_vm_*, new sockets, file handles, BPF, perf, userfaultfd,
//     keyrings, modules, kexec, reboot. Everything a renderer does
//     (memory, threads, futexes, reading and writing its two
//     descriptors) is allowed; a denylist rather than an allowlist,
//     because Mesa's and LLVM's system calls vary with their versions
//     and a renderer killed by a missing entry would be a broken GPU.
func confine() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	dir := os.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555"); err != nil {
		return fmt.Errorf("mount an empty root: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make the empty root read-only: %w", err)
	}
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return installSeccomp()
}

// deniedSyscalls fail with EPERM.
var deniedSyscalls = []uint32{
	unix.SYS_EXECVE, unix.SYS_EXECVEAT,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_SOCKET, unix.SYS_SOCKETPAIR, unix.SYS_CONNECT, unix.SYS_BIND,
	unix.SYS_LISTEN, unix.SYS_ACCEPT, unix.SYS_ACCEPT4,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT,
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_SWAPON, unix.SYS_SWAPOFF,
	unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME, unix.SYS_ACCT,
	unix.SYS_PIDFD_GETFD, unix.SYS_PERSONALITY,
}

// namespaceFlags are clone flags that would make new namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// seccomp_data offsets and BPF return values.
const (
	offNr        = 0
	offArch      = 4
	offArg0      = 16
	auditArchX86 = 0xc000003e // AUDIT_ARCH_X86_64
	x32Bit       = 0x40000000 // __X32_SYSCALL_BIT
	retAllow     = unix.SECCOMP_RET_ALLOW
	retKill      = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM     = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS    = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

// filter builds the seccomp program: another architecture or the x32 ABI
// kills the process; each denied call returns EPERM; clone3 returns
// ENOSYS (its flags live in memory a filter cannot read, and libc falls
// back to clone); clone with a namespace flag returns EPERM.
func filter() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	p := []unix.SockFilter{
		stmt(ld, offArch),
		jump(jeq, auditArchX86, 1, 0),
		stmt(ret, retKill),
		stmt(ld, offNr),
		jump(jge, x32Bit, 0, 1),
		stmt(ret, retKill),
	}
	for _, nr := range deniedSyscalls {
		p = append(p, jump(jeq, nr, 0, 1), stmt(ret, retEPERM))
	}
	p = append(p,
		jump(jeq, unix.SYS_CLONE3, 0, 1), stmt(ret, retENOSYS),
		jump(jeq, unix.SYS_CLONE, 0, 3),
		stmt(ld, offArg0),
		jump(jset, namespaceFlags, 0, 1),
		stmt(ret, retEPERM),
		stmt(ret, retAllow),
	)
	return p
}

// installSeccomp installs the filter on every thread of the helper.
func installSeccomp() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	p := filter()
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
