// Command smol-gpu is the 3D renderer helper of smol's virtio-gpu device:
// it runs virglrenderer (OpenGL through Mesa; llvmpipe where the host has
// no GPU) for one machine, in a process of its own, sandboxed.
//
// It is started by the VMM (package devices/gpu/virgl), never by hand:
// fd 3 is its socket to the VMM, fd 4 the guest's RAM. See that package
// for the protocol and the sandbox's reasons. It is the only part of smol
// built with cgo: `make gpu` builds it into bin/, beside bin/smol, where
// smol looks for it.
package main
