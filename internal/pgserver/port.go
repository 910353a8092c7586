package pgserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowestPort is where FreePort starts looking: above the ports services
// conventionally claim.
const lowestPort = 10000

var handedOut sync.Map // port → struct{}: ports FreePort has returned

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on now
// (the embedded server's default, and tests that need a fixed port),
// chosen below the kernel's range of ephemeral ports. A port the caller
// releases and binds again (a server or proxy restarted on the same
// address) is then never taken meanwhile as the local end of an outgoing
// connection, which a port the kernel picked for a listener of port 0 can
// be. A port is not returned twice by one process. When the range leaves
// no room below it, the kernel picks.
func FreePort() (int, error) {
	if low := ephemeralLow(); low > lowestPort+1000 {
		for range 200 {
			port := lowestPort + rand.IntN(low-lowestPort)
			if _, taken := handedOut.LoadOrStore(port, struct{}{}); taken {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				continue
			}
			_ = l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// when it cannot be read (not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return low
}
