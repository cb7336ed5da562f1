// Package snapshot is smol's one file format for a machine's saved state:
// a header, a table of named sections (the host the state was taken on,
// each vCPU, the VM's interrupt controllers and clock, each device), and
// the guest's RAM, page-aligned after them so that a restore can map it
// privately and let the guest read it lazily.
//
// Trust boundary: a snapshot file is hostile input. Open checks the magic,
// the format's major version, the table's bounds and every section's size
// before anything is decoded; each state section is capped (MaxSection)
// and checksummed (SHA-256, checked when it is read), and a section of an
// unknown version is refused. The RAM is not hashed, since hashing it
// would read all of it at restore: its bytes only ever become the guest's
// own memory, which the guest controls anyway, and its extent is checked
// against the file's size before it is mapped.
//
// Layout (little-endian):
//
//	header   magic "SMOLSNAP", major u16, minor u16, sections u32, reserved u32,
//	         table checksum [32]byte (SHA-256 of the table)
//	table    per section: name [24]byte (NUL-padded), version u32, flags u32 (1: raw region),
//	         offset u64, length u64, checksum [32]byte (SHA-256 of the payload)
//	payloads the sections' JSON, one after the other
//	regions  each from a page boundary: raw bytes, sparse (zero runs are
//	         holes), not hashed (checksum zero): the guest's RAM ("ram", always
//	         there, a multiple of pages; empty in a fork's hand-over, whose RAM
//	         is the parent's sealed memfd) and, in a snapshot meant to restore
//	         anywhere, each disk's contents ("disk.0", "disk.1", ...)
package snapshot
