package pgserver

import (
	"net"
	"strconv"
	"testing"
)

// Regression: a test proxy restarted on its address failed with "bind:
// address already in use". Its port was one the kernel picked for a
// listener of port 0, from the ephemeral range, and while the proxy was
// down an outgoing connection took it as its local port. FreePort's
// ports lie below that range, are free, and are not repeated.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low <= lowestPort+1000 {
		t.Skipf("the ephemeral range starts at %d: no room below it on this machine", low)
	}
	seen := map[int]bool{}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lowestPort || port >= low {
			t.Fatalf("port %d outside [%d, %d)", port, lowestPort, low)
		}
		if seen[port] {
			t.Fatalf("port %d returned twice", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		_ = l.Close()
	}
}
