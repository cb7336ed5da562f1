package virgl

import (
	"os"
	"syscall"
)

// sandboxAttr starts the helper in new user, mount, network, IPC, UTS and
// PID namespaces, as root of its user namespace mapped to the VMM's own
// user (it gains no privilege on the host), without network interfaces
// but loopback (down), and killed when the VMM's thread that started it
// ends. The helper itself then drops the file system and installs its
// seccomp filter (cmd/smol-gpu).
func sandboxAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWPID,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}
