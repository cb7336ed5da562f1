package box

// initScript is the box's /init, run by busybox. It mounts the host's root
// filesystem from virtio-9p, gives it the box's own /proc, /sys and /dev,
// runs the job script in a chroot, and resets the box, which QEMU
// (-no-reboot) turns into its exit. The job's exit status travels back in a
// file, because QEMU's own exit status cannot carry it.
const initScript = `#!/bin/busybox sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
job=
for arg in $(cat /proc/cmdline); do
	case "$arg" in smolbox.job=*) job=${arg#smolbox.job=} ;; esac
done
fail() { echo "smolbox: $*" >/dev/console; reboot -f; }
[ -n "$job" ] || fail "no smolbox.job= on the kernel command line"
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap,access=client hostroot /host || fail "cannot mount the host root over 9p"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /host/dev/pts
mount -t tmpfs tmpfs /host/dev/shm
mount -t tmpfs tmpfs /host/run
ip link set lo up 2>/dev/null
ifconfig lo 127.0.0.1 up 2>/dev/null
stty -F /dev/console -opost -echo 2>/dev/null
chroot /host /bin/sh "$job/run.sh" </dev/null
echo $? > "/host$job/status.tmp" && mv "/host$job/status.tmp" "/host$job/status"
sync
echo 0 > /proc/sys/kernel/printk # a planned reset is not news
reboot -f
`

// busyboxApplets are the applets initScript uses.
var busyboxApplets = []string{"sh", "mount", "mkdir", "cat", "chroot", "reboot", "sync", "mv", "stty", "ip", "ifconfig", "echo"}
