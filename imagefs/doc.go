// Package imagefs turns an OCI/Docker image (from a registry, a `docker
// save` or OCI-layout tarball, or an OCI-layout directory) into a read-only
// ext4 root filesystem image plus the image's run configuration, cached on
// disk by image digest.
//
// # Trust boundary
//
// An image is hostile: its names, link targets, modes, owners, device
// numbers, xattrs and sizes are chosen by whoever built it. So:
//
//   - No byte of an image reaches a shell or any command language. Layers
//     are applied to a tree held in memory and written as ext4 by this
//     module's own writer (package ext4fs); no external tool runs.
//   - Nothing of an image is created on the host filesystem but the image
//     file itself (0600, in a 0700 directory): no setuid bit, device node,
//     file capability or hostile path ever exists on the host, and no
//     layer-chosen path is handed to the kernel, so no symlink in a layer
//     can point a write outside.
//   - Every tar header is validated before it is applied (names and link
//     targets against PATH_MAX/NAME_MAX and NUL, owners, device numbers,
//     xattr names against the kernel's namespaces and 255-byte limit, entry
//     types); an invalid entry fails the pull naming the entry, quoted.
//   - What one image may unpack to is bounded while it streams (Limits:
//     SMOL_MAX_IMAGE_SIZE, SMOL_MAX_IMAGE_ENTRIES), so a compressed bomb
//     fails in seconds.
//   - Every digest that names content is checked against the content:
//     layers while they stream, manifests and configs before they are used.
//   - Image-chosen text in smol's messages is quoted.
//
// # Why ext4 and not a directory
//
// A microVM needs a block device for its root. Building the ext4 image once
// per image digest makes every later boot a cheap overlay of one file, and
// keeps the host free of extracted image trees that would need root to own
// correctly and would carry the image's privileges.
//
// # Layout on disk
//
//	<home>/images/refs.json                ref → key index (written via rename, guarded by refs.lock)
//	<home>/images/sha256/<hex>/            a registry image's entry: rootfs.ext4, config.json, complete
//	<home>/images/sha256/layout-<hex>/     an OCI layout's (dir or tarball), keyed by its verified manifest
//	<home>/images/sha256/docker-<hex>/     a docker-save tarball's, keyed by its verified config
//	<home>/images/sha256/<entry>.lock      flock held while an entry is built or removed
//	<home>/images/sha256/<entry>.tmp-*     entry under construction (renamed into place when done)
//	<home>/images/tmp/                     scratch space (unpacked OCI-layout tarballs)
//
// Local sources get key spaces of their own: a file on disk can never
// satisfy or replace a registry reference's entry, even one whose bytes
// honestly hash to the same digest. Everything is private to the user
// (directories 0700, files 0600).
//
// An entry counts only when its directory carries the `complete` marker,
// which is written after everything else has been fsynced, inside the
// temporary directory, which is then renamed into place. A killed pull
// therefore leaves at most a *.tmp-* directory, which the next build of that
// digest (or the next Open) removes.
//
// # Layer semantics
//
// Whiteouts (.wh.NAME), opaque directories (.wh..wh..opq), hardlinks,
// symlinks, devices, FIFOs, modes (setuid/setgid/sticky included), owners,
// times and PAX xattrs (SCHILY.xattr.*, POSIX ACLs included) are applied as
// containerd would. Names are cleaned as if rooted, so "../x" and "/x" both
// land on /x; a symlink met in a parent component is resolved scoped to the
// root ("/" and ".." never leave it); the last component of an entry is
// never followed; a hardlink's target must exist inside the root.
package imagefs
