// Package imagefs turns an OCI/Docker image (from a registry, a `docker
// save` or OCI-layout tarball, or an OCI-layout directory) into a read-only
// ext4 root filesystem image plus the image's run configuration, cached on
// disk by image digest.
//
// # Why ext4 and not a directory
//
// A microVM needs a block device for its root. Building the ext4 image once
// per image digest with mke2fs -d (e2fsprogs ≥ 1.43) makes every later boot a
// cheap copy/overlay of one file, and keeps the host free of extracted image
// trees that would need root to own correctly.
//
// # Layout on disk
//
//	<home>/images/refs.json          ref → digest index (written via rename, guarded by refs.lock)
//	<home>/images/<algo>/<hex>/      one complete entry: rootfs.ext4, config.json, complete
//	<home>/images/<algo>/<hex>.lock  flock held while an entry is built or removed
//	<home>/images/<algo>/<hex>.tmp-* entry under construction (renamed into place when done)
//	<home>/images/tmp/               scratch space (unpacked OCI-layout tarballs)
//
// An entry counts only when its directory carries the `complete` marker,
// which is written after everything else has been fsynced, inside the
// temporary directory, which is then renamed into place. A killed pull
// therefore leaves at most a *.tmp-* directory, which the next build of that
// digest (or the next Open) removes.
//
// # Layer semantics and safety
//
// Layers are applied by this package, not by a library: whiteouts
// (.wh.NAME), opaque directories (.wh..wh..opq), hardlinks, symlinks,
// devices, modes, owners, times and PAX xattrs. Layer contents are treated as
// hostile. Every path is resolved component by component with openat(2) and
// O_NOFOLLOW relative to a directory descriptor of the staging root; a
// symlink met in a parent component is resolved *scoped to the staging root*
// (as containerd does: "/" and ".." never leave it), and the last component
// of an entry is never followed. Names are cleaned as if rooted, so "../x"
// and "/x" both land on <root>/x.
//
// When the process is not root (or cannot chown/mknod/set an xattr) the
// staging tree keeps the wanted ownership, modes, device nodes and xattrs in
// memory, and they are written into the finished ext4 image with debugfs.
package imagefs
