package netloop

import "errors"

// ErrWantLoop ends both pumps when the session goes back to its loop.
var ErrWantLoop = errors.New("back to the event loop")

// ErrHandover is what a step returns on a loop thread, before changing
// anything, when its message needs what only the pumps may do: wait (a
// hidden query, a lease, the generator), or end the session. The message
// stays buffered, and the pump takes it from its start.
var ErrHandover = errors.New("continue in the pumps")

// Parking is what the pumps' parking asks of the session.
type Parking interface {
	// MayReenter reports whether the session should go back to its loop
	// now that both pumps wait for input. Called by the second pump to
	// park.
	MayReenter() bool
	// Wake wakes the pump of side, waiting for input, so that it sees
	// that it must stop (a read deadline in the past).
	Wake(side Side)
}

// Pump states (Relay.state): a pump sets its parked bit while it waits for
// input in Input.Poll with no whole message buffered; the pump that parks
// second, when the session may go back to the loop, also sets stopping,
// and wakes the other. A pump that sees stopping returns ErrWantLoop at
// once, without taking another message. Both pumps being parked means no
// message is half relayed, no hidden query runs and nothing waits for a
// write, so the loop can go on from the buffers as they are.
const (
	parkedClient uint32 = 1 << iota
	parkedServer
	stopping
)

// parker is a pump's side of that protocol.
type parker struct {
	r    *Relay
	side Side
}

func (k *parker) bit() uint32 {
	if k.side == Client {
		return parkedClient
	}
	return parkedServer
}

// park marks the pump parked; true means stop now (ErrWantLoop).
func (k *parker) park() bool {
	st := &k.r.state
	for {
		old := st.Load()
		if old&stopping != 0 {
			return true
		}
		nw := old | k.bit()
		if nw&(parkedClient|parkedServer) == parkedClient|parkedServer && k.r.parking.MayReenter() {
			nw |= stopping
		}
		if !st.CompareAndSwap(old, nw) {
			continue
		}
		if nw&stopping == 0 {
			return false
		}
		k.r.parking.Wake(1 - k.side)
		return true
	}
}

// unpark clears the pump's parked bit when it has input again; true means
// stop now (ErrWantLoop).
func (k *parker) unpark() bool {
	st := &k.r.state
	for {
		old := st.Load()
		if old&stopping != 0 {
			return true
		}
		if old&k.bit() == 0 || st.CompareAndSwap(old, old&^k.bit()) {
			return false
		}
	}
}
