// Package gateway is the guest's network when it has one (--net): an
// in-process userspace gateway on gVisor's TCP/IP stack, backing the
// guest's virtio-net device without a TAP, root or any host configuration.
//
// The guest sees one Ethernet link to the gateway (GatewayIP, also its DNS
// resolver) and has GuestIP. No packet is ever forwarded: every TCP
// connection and UDP flow the guest opens ends in the gateway's stack and
// is re-originated as an ordinary socket of the VMM process, after the
// egress policy (package netdev/policy) allowed its destination. Every DNS
// query, to any address and over UDP or TCP port 53, is answered by the
// gateway, which resolves only the names the policy allows and teaches the
// policy the addresses it hands out.
//
// Trust boundary: every frame comes from the guest, which is hostile. A
// frame whose source MAC or IPv4 address is not the guest's is dropped, as
// is every frame that is not ARP or IPv4 (IPv6 included: the guest's
// network is IPv4 only, and AAAA queries are answered empty), and every
// ICMP message except an echo request to the gateway itself (no reply is
// ever forged for a remote host). What the guest can make the gateway hold
// is bounded by Limits: open flows, half-open connections, DNS queries in
// flight, buffered bytes per flow.
package gateway
