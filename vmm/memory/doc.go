// Package memory provides a virtual machine's guest physical memory: one
// memfd, mapped shared into the VMM, laid out the way an x86 PC expects.
//
// RAM starts at guest physical address 0. Below 4 GiB it stops at
// MMIOHoleStart, leaving [MMIOHoleStart, 4 GiB) for device registers (the
// IOAPIC, the local APICs, virtio-mmio windows); any RAM beyond that continues
// at 4 GiB. The memfd is one contiguous file behind both pieces, so the VM
// needs at most two KVM memory slots, a snapshot is one file, and a fork can
// map the same memfd MAP_PRIVATE to get copy-on-write pages from the host
// kernel.
//
// Pages are not allocated until the guest (or the VMM) touches them: a guest
// given 8 GiB that uses 100 MiB costs the host about 100 MiB.
//
// Every access by guest-physical address is bounds-checked: addresses come
// from the guest, which is not trusted.
package memory
