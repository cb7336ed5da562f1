// Package ioapic emulates an 82093AA-style I/O APIC for a VMM whose local
// APICs are KVM's and whose device interrupts reach them as MSIs (KVM's
// "split irqchip").
//
// Why a split irqchip: an interrupt routed as an MSI is injected by KVM
// from the irqfd's wake-up itself, where one routed to KVM's in-kernel I/O
// APIC goes through a kernel worker; the machine needs no PIC or PIT; and
// it is cloud-hypervisor's arrangement and QEMU microvm's default, which
// makes it the one to compare against when guests misbehave (BENCHMARKS.md,
// "smol's own split irqchip does not end it"). Here the guest programs its
// redirection table through this device, and every change becomes a KVM GSI
// route: GSI n, raised by a device's irqfd, turns into the MSI that pin n's
// entry describes. Only the guest's (rare) reprogramming of a pin passes
// through the VMM.
//
// Deliveries therefore bypass this model: it never sees a line rise, so it
// keeps no IRR and sets no remote IRR. That is exact for the edge-triggered
// pulses smol's devices send (an irqfd write is one edge), which is how the
// VMM's ACPI tables declare every interrupt. A guest that programs a pin
// level-triggered anyway gets a level-triggered MSI; KVM reports its EOI to
// the VMM (an IOAPIC_EOI exit), which has nothing to re-deliver: the line
// was a pulse and is low again.
package ioapic

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// Pins is the number of redirection entries, as on KVM's in-kernel I/O APIC
// and the 82093AA.
const Pins = 24

// Register window: the guest selects a register by writing its index to
// IOREGSEL, then reads or writes it through IOWIN.
const (
	regSelectOffset = 0x00 // IOREGSEL
	regWindowOffset = 0x10 // IOWIN
	// WindowSize is the MMIO range the device decodes.
	WindowSize = 0x20
)

// Register indices.
const (
	regID           = 0x00
	regVersion      = 0x01
	regArbitration  = 0x02
	regRedirFirst   = 0x10 // entry n's low half is 0x10+2n, its high half 0x11+2n
	version         = 0x11 // the 82093AA's; no EOI register (that came with 0x20)
	idMask          = 0x0f << 24
	redirReadOnly   = 1<<12 | 1<<14 // delivery status, remote IRR
	redirMasked     = 1 << 16
	redirLevel      = 1 << 15
	redirResetValue = redirMasked // every pin masked, as at power-on
)

// Route is where one pin's interrupts go: the MSI address and data KVM
// delivers when the pin's GSI is raised.
type Route struct {
	Pin       uint32
	AddressLo uint32
	Data      uint32
}

// Router installs the routes of every unmasked pin, replacing all earlier
// ones; a pin absent from routes is masked and its interrupts are dropped,
// as an edge on a masked 82093AA pin is. The VMM implements it with
// KVM_SET_GSI_ROUTING.
type Router func(routes []Route) error

// State is the guest-visible state a snapshot keeps.
type State struct {
	ID       uint32       // the ID register (bits 24-27)
	Select   uint32       // IOREGSEL
	Redirect [Pins]uint64 // the redirection table
}

// IOAPIC is the device. Its methods are safe for concurrent use by vCPUs.
type IOAPIC struct {
	route Router

	mu        sync.Mutex
	state     State
	installed []Route // the routes last given to route; nil before the first
	routeErr  error   // the first Router failure, reported by Err
}

// New returns an I/O APIC with the given ID (the MADT's) and every pin
// masked. It installs no routes until the guest unmasks a pin.
func New(id uint8, route Router) *IOAPIC {
	a := &IOAPIC{route: route}
	a.state.ID = uint32(id) << 24 & idMask
	for i := range a.state.Redirect {
		a.state.Redirect[i] = redirResetValue
	}
	return a
}

// Read implements devices.Device. Only aligned 32-bit accesses to IOREGSEL
// and IOWIN mean anything; anything else reads as zero.
func (a *IOAPIC) Read(offset uint64, data []byte) {
	clear(data)
	if len(data) != 4 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch offset {
	case regSelectOffset:
		binary.LittleEndian.PutUint32(data, a.state.Select)
	case regWindowOffset:
		binary.LittleEndian.PutUint32(data, a.readRegister(a.state.Select))
	}
}

// Write implements devices.Device.
func (a *IOAPIC) Write(offset uint64, data []byte) {
	if len(data) != 4 {
		return
	}
	v := binary.LittleEndian.Uint32(data)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch offset {
	case regSelectOffset:
		a.state.Select = v & 0xff
	case regWindowOffset:
		a.writeRegister(a.state.Select, v)
	}
}

func (a *IOAPIC) readRegister(index uint32) uint32 {
	switch {
	case index == regID, index == regArbitration:
		return a.state.ID
	case index == regVersion:
		return (Pins-1)<<16 | version
	case index >= regRedirFirst && index < regRedirFirst+2*Pins:
		e := a.state.Redirect[(index-regRedirFirst)/2]
		if index%2 == 1 {
			return uint32(e >> 32)
		}
		return uint32(e)
	}
	return 0
}

func (a *IOAPIC) writeRegister(index uint32, v uint32) {
	switch {
	case index == regID:
		a.state.ID = v & idMask
	case index >= regRedirFirst && index < regRedirFirst+2*Pins:
		e := &a.state.Redirect[(index-regRedirFirst)/2]
		if index%2 == 1 {
			*e = uint64(v)<<32 | *e&0xffff_ffff
		} else {
			*e = *e&^0xffff_ffff | uint64(v)&^redirReadOnly | *e&redirReadOnly
		}
		a.reroute()
	}
}

// reroute gives the router the table's routes if they changed. The guest
// writes an entry in two halves (Linux: high, then low), and masks and
// unmasks pins one write at a time, so most writes change nothing KVM sees.
func (a *IOAPIC) reroute() {
	routes := a.routes()
	if a.installed != nil && slices.Equal(routes, a.installed) {
		return
	}
	if err := a.route(routes); err != nil {
		if a.routeErr == nil {
			a.routeErr = err
		}
		return
	}
	a.installed = routes
}

// routes translates every unmasked entry into its MSI, the way the 82093AA
// forwards an interrupt to the local APICs: the destination and its mode go
// into the address, vector, delivery mode and trigger mode into the data.
func (a *IOAPIC) routes() []Route {
	routes := []Route{}
	for pin, e := range a.state.Redirect {
		deliveryMode := uint32(e>>8) & 7
		if e&redirMasked != 0 || !routable[deliveryMode] {
			continue
		}
		vector := uint32(e & 0xff)
		logical := uint32(e>>11) & 1
		dest := uint32(e >> 56)
		data := vector | deliveryMode<<8
		if e&redirLevel != 0 {
			data |= 1<<15 | 1<<14 // level-triggered, asserted
		}
		routes = append(routes, Route{
			Pin:       uint32(pin),
			AddressLo: 0xFEE0_0000 | dest<<12 | logical<<2,
			Data:      data,
		})
	}
	return routes
}

// routable says which delivery modes an entry may ask for: fixed, lowest
// priority, SMI, NMI and INIT, as an MSI may. ExtINT means "ask the 8259",
// which this machine does not have, and modes 3 and 6 are reserved; an entry
// with one of those routes nowhere, like a masked one, rather than hand KVM
// a message it can only log as unsupported.
var routable = [8]bool{0: true, 1: true, 2: true, 4: true, 5: true}

// Err reports the first routing failure, if any: a guest whose interrupts
// could not be routed will not get them. Restore returns such a failure
// itself; one during a guest's MMIO write has no caller to return to, so
// it waits here, and the Router is the place to report it as it happens
// (smol's VMM logs it there).
func (a *IOAPIC) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.routeErr
}

// State returns the guest-visible state.
func (a *IOAPIC) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// Restore loads a saved state, checked first, and installs its routes.
func (a *IOAPIC) Restore(s State) error {
	if s.ID&^idMask != 0 || s.Select > 0xff {
		return fmt.Errorf("ioapic: bad saved ID %#x or register select %#x", s.ID, s.Select)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state = s
	a.installed = nil
	a.routeErr = nil
	a.reroute()
	return a.routeErr
}
