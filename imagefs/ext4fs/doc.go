// Package ext4fs writes an ext4 filesystem image from a file tree held in
// memory, with no external tool and no file of the tree ever created on the
// host.
//
// # Why its own writer
//
// Image layers are hostile. Building the filesystem with mke2fs -d needs
// the tree unpacked on the host first (carrying the image's setuid bits,
// device nodes and capabilities while it exists), and whatever mke2fs
// cannot take from the tree had to be patched in with a debugfs script: a
// command language into which image-chosen names flowed. Here a layer's
// bytes only ever become fields of on-disk structures, and the only host
// file is the image itself.
//
// # What it writes
//
// A deliberately small subset of ext4, which every Linux since 3.16 mounts
// read-write and e2fsck accepts as clean:
//
//   - 4 KiB blocks, 256-byte inodes with nanosecond times, no checksums,
//     and no journal unless Options.JournalBlocks asks for one (a base
//     image is never written in place; a machine's writable layer is);
//   - extents for every regular file, directory and long symlink;
//   - flex_bg, so that bitmaps and inode tables can all be placed at the
//     end, after the file data, which is therefore streamed straight into
//     the image as layers are read, before the number of files is known;
//   - sparse_super2 with no backup superblocks: only group 0 holds the
//     superblock and the group descriptors, whose blocks are reserved up
//     front for the largest image the caller allows;
//   - linear directories (dir_index is on, so a guest that grows one past a
//     block gets an indexed one), in-inode and block extended attributes,
//     POSIX ACLs converted to ext4's on-disk form, device nodes, FIFOs,
//     hardlinks.
//
// File data is written block-aligned; all-zero blocks are left as holes in
// the image file, and the blocks of files that a later layer replaced are
// marked free and punched out when the image is finished.
package ext4fs
