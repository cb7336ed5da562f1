package ext4fs

import (
	"syscall"
	"time"
)

// File types, as in the S_IFMT bits of Node.Mode.
const (
	TypeMask    = syscall.S_IFMT
	TypeReg     = syscall.S_IFREG
	TypeDir     = syscall.S_IFDIR
	TypeSymlink = syscall.S_IFLNK
	TypeChar    = syscall.S_IFCHR
	TypeBlock   = syscall.S_IFBLK
	TypeFifo    = syscall.S_IFIFO
)

// Node is one inode of the tree. A node reachable under several names is
// a hardlink; directories must be reachable under one name only.
type Node struct {
	Mode     uint32 // file type (TypeReg, …) | permission bits incl. setuid/setgid/sticky
	UID, GID uint32
	Mtime    time.Time // also used as atime, ctime and crtime: the image is reproducible
	Link     string    // symlink target
	Major    uint32    // device number of a TypeChar or TypeBlock node
	Minor    uint32
	Xattrs   []Xattr          // full names ("user.x", "security.capability", "system.posix_acl_access")
	Children map[string]*Node // a directory's entries, without "." and ".."

	size int64    // bytes of data (regular files)
	data []extent // where WriteData put them

	// Filled in by Finish.
	ino     uint32
	parent  uint32 // a directory's parent's inode
	nlink   uint32
	meta    []extent // directory or long-symlink blocks
	leaves  []uint32 // extent-tree leaf blocks
	xblock  uint32   // extended-attribute block, 0 if none
	inInode []byte   // extended attributes stored in the inode, encoded
}

// NewDir returns an empty directory node.
func NewDir(perm, uid, gid uint32, mtime time.Time) *Node {
	return &Node{Mode: TypeDir | perm&0o7777, UID: uid, GID: gid, Mtime: mtime, Children: map[string]*Node{}}
}

// Type is the node's file type bits.
func (n *Node) Type() uint32 { return n.Mode & TypeMask }

// IsDir tells whether the node is a directory.
func (n *Node) IsDir() bool { return n.Type() == TypeDir }

// Size is the number of data bytes written for a regular file.
func (n *Node) Size() int64 { return n.size }

// extent is a run of physical blocks.
type extent struct {
	start, count uint32
}
