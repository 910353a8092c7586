package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// nodeFlag is --node: a node number, or auto.
type nodeFlag struct {
	n    *int
	auto *bool
}

func (f nodeFlag) String() string {
	switch {
	case f.n == nil:
		return "0"
	case *f.auto:
		return "auto"
	}
	return strconv.Itoa(*f.n)
}

func (f nodeFlag) Set(s string) error {
	if s == "auto" {
		*f.n, *f.auto = 0, true
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a node number 1..1023, or auto")
	}
	*f.n, *f.auto = n, false
	return nil
}

// resolveNode checks the node settings and, with --node-from-hostname,
// sets o.node from the host name.
func (m *Main) resolveNode(fs *flag.FlagSet, o *options, fromFile map[string]bool) error {
	lo, hi, err := parseNodeRange(o.nodeRange)
	if err != nil {
		return err
	}
	o.nodeMin, o.nodeMax = lo, hi
	// 0 means "no node" only when the flag is absent: given explicitly
	// (flag, environment or file) it must name a real node.
	given := func(name string) bool {
		g := m.Getenv("SNOWFLAKE_PROXY_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))) != "" || fromFile[name]
		fs.Visit(func(f *flag.Flag) { g = g || f.Name == name })
		return g
	}
	nodeGiven := given("node")
	switch {
	case o.nodeFromHostname && nodeGiven:
		return errors.New("--node and --node-from-hostname both given: give one")
	case given("node-base") && !o.nodeFromHostname:
		return errors.New("--node-base needs --node-from-hostname")
	case o.nodeFromHostname:
		hostname := m.Hostname
		if hostname == nil {
			hostname = os.Hostname
		}
		host, err := hostname()
		if err != nil {
			return fmt.Errorf("--node-from-hostname: %w", err)
		}
		base := o.nodeBase
		if base == 0 {
			base = lo
		}
		if o.node, err = nodeFromHostname(host, base, lo, hi); err != nil {
			return err
		}
		o.hostname, o.nodeSource = host, "hostname"
	case o.nodeAuto:
		o.nodeSource = "auto"
	case nodeGiven:
		if o.node < 1 || o.node > 1023 {
			return fmt.Errorf("invalid --node %d: must be 1..1023", o.node)
		}
		if o.node < lo || o.node > hi {
			return fmt.Errorf("invalid --node %d: outside --node-range %d-%d", o.node, lo, hi)
		}
		o.nodeSource = "node"
	}
	return nil
}

// parseNodeRange parses --node-range: "lo-hi" within 1..1023, or one
// node.
func parseNodeRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || lo < 1 || hi > 1023 || lo > hi {
		return 0, 0, fmt.Errorf("invalid --node-range %q: want FIRST-LAST within 1-1023, e.g. 1-511", s)
	}
	return lo, hi, nil
}

// nodeFromHostname is base plus the ordinal ending the host name (its
// first label): proxy-3 gives base + 3, as the pods of a StatefulSet are
// named. The node must fall within lo..hi.
func nodeFromHostname(host string, base, lo, hi int) (int, error) {
	name, _, _ := strings.Cut(host, ".")
	i := strings.LastIndexByte(name, '-')
	ord := name[i+1:]
	if i < 0 || ord == "" || strings.Trim(ord, "0123456789") != "" {
		return 0, fmt.Errorf("--node-from-hostname: host name %q has no ordinal: want a name ending in -N, as a StatefulSet's pods (proxy-0, proxy-1, ...)", host)
	}
	n, err := strconv.Atoi(ord)
	if err != nil || n > 1023 {
		return 0, fmt.Errorf("--node-from-hostname: host name %q: ordinal %s is too large for a node", host, ord)
	}
	node := base + n
	if node < lo || node > hi {
		return 0, fmt.Errorf("--node-from-hostname: host name %q gives node %d (%d + %d), outside %d-%d", host, node, base, n, lo, hi)
	}
	return node, nil
}
