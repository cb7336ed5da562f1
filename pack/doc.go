// Package pack is the .smolmachine format: a machine packed into one
// portable file (smol pack create), with everything needed to run it on
// another host with no image pull and no setup: a manifest (the machine's
// shape and exec defaults, its network policy, the smol that made it) and
// sections (the guest kernel, the agent initramfs, the root filesystem,
// optionally the machine's writable layer and a live state), each
// compressed with zstd and listed in the manifest with its SHA-256.
//
// Layout (docs/smolmachine.md):
//
//	header    magic "SMOLPACK", major u16, minor u16, manifest length u32,
//	          reserved u32 (little-endian)
//	manifest  JSON (Manifest), at most MaxManifest bytes
//	data      the sections' compressed bytes one after the other; a
//	          section's Offset counts from the start of data, so the
//	          manifest never depends on its own length
//
// Determinism: a writer that is given the same inputs writes the same
// bytes (no clock, no map order, single-threaded zstd at a fixed level),
// so two packs of one image are byte-identical and a pack's SHA-256 names
// its contents.
//
// Trust boundary: a .smolmachine file is hostile input. Open checks the
// header, caps and decodes the manifest and checks every section's extent
// against the file before anything is decompressed; Extract decompresses
// at most the section's stated size (a zstd bomb stops there) and checks
// the size and the digest of what came out, so a damaged or altered
// section is refused, never half-used.
package pack
