package box

// initScript is the box's /init, run by busybox. It mounts the host's root
// filesystem from virtio-9p, gives it the box's own /proc, /sys and /dev,
// runs the job script with it as its root, and resets the box, which QEMU
// (-no-reboot) turns into its exit. The job's exit status travels back in a
// file, because QEMU's own exit status cannot carry it, and over the life
// port (life.go), which also carries the heartbeats: one loop that needs
// nothing but the box kernel, started before anything touches 9p, and one
// that proves the 9p share still answers. Both run from the initramfs, so
// a stuck share stops only the second. The life port's fd (3) is closed
// for the command: it is the harness's channel, not the command's.
const initScript = `#!/bin/busybox sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
job= beat=2
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	smolbox.job=*) job=${arg#smolbox.job=} ;;
	smolbox.beat=*) beat=${arg#smolbox.beat=} ;;
	esac
done
fail() { echo "smolbox: $*" >/dev/console; reboot -f; }
[ -n "$job" ] || fail "no smolbox.job= on the kernel command line"

# The life port: virtio-serial ports appear once the driver and QEMU have
# exchanged their control messages, which may be just after init starts.
life= n=0
while [ -z "$life" ] && [ $n -lt 100 ]; do
	for p in /sys/class/virtio-ports/*; do
		[ "$(cat "$p/name" 2>/dev/null)" = ` + lifePort + ` ] && life=/dev/${p##*/}
	done
	[ -n "$life" ] || { n=$((n+1)); sleep 0.1; }
done
[ -n "$life" ] || fail "no virtio-serial port named ` + lifePort + ` (a box kernel without CONFIG_VIRTIO_CONSOLE?)"
exec 3<>"$life"
( while :; do read -r up _ </proc/uptime; echo "alive $up" >&3; sleep $beat; done ) &
echo $! >>/loops
# tasks lists the box's tasks for the harness, leaving out init and its
# loops (and their sleeps): the harness's machinery, not the command's.
tasks() {
	loops=" $(echo $(cat /loops)) "
	for t in /proc/[0-9]*/task/[0-9]*; do
		s= w= c=
		read -r s <"$t/stat" 2>/dev/null
		s=${s##*) }
		set -- $s
		[ -n "$1" ] && [ "$1" != I ] || continue # gone, or an idle kernel thread
		case " 1$loops" in *" ${t##*/} "*) continue ;; esac
		case "$loops" in *" $2 "*) continue ;; esac
		k=u; [ $(($7 & 0x200000)) = 0 ] || k=k # PF_KTHREAD
		read -r w <"$t/wchan" 2>/dev/null
		read -r c <"$t/comm" 2>/dev/null
		echo "task ${t##*/} $1 $k ${w:-0} ${c:-?}"
	done
	echo tasks-end
}
( while read -r req; do [ "$req" = tasks ] && tasks >&3; done <&3 ) &
echo $! >>/loops

mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap,access=client hostroot /host || fail "cannot mount the host root over 9p"
( while :; do [ -d "/host$job" ]; read -r up _ </proc/uptime; echo "9p $up" >&3; sleep $beat; done ) &
echo $! >>/loops
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
# The job runs with the host's root as the root of a mount namespace of
# its own (moved onto /, as switch_root does), not merely chrooted: the
# kernel refuses user namespaces to chrooted processes, and programs
# under test (passt's sandbox) need them.
unshare -m sh -c 'cd /host && mount --move . / && exec chroot . /bin/sh "$1/run.sh"' - "$job" </dev/null 3>&-
code=$?
echo "status $code" >&3
echo $code > "/host$job/status.tmp" && mv "/host$job/status.tmp" "/host$job/status"
sync
echo 0 > /proc/sys/kernel/printk # a planned reset is not news
reboot -f
`

// busyboxApplets are the applets initScript uses.
var busyboxApplets = []string{"sh", "mount", "mkdir", "cat", "chroot", "unshare", "reboot", "sync", "mv", "stty", "ip", "ifconfig", "echo", "sleep"}
