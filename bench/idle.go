package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The idle subcommand measures what an idle client session costs the
// proxy (the target: at most 64 KiB of heap per session). It runs the proxy
// built from the tree in front of a stub upstream inside this process (a
// real server would need thousands of backends), opens -sessions client
// sessions that complete startup and then stay idle, and reads the proxy's
// runtime.MemStats (through --pprof, after a forced GC) before and after:
// (HeapInuse + StackInuse) delta / sessions.
//
//	go run ./bench idle [-sessions 2000]

// idleLimit is the target per idle session.
const idleLimit = 64 << 10

// stubParams are the ParameterStatus messages PostgreSQL 15 sends at
// startup, so that the proxy stores as much per session as with a real
// server.
var stubParams = [][2]string{
	{"application_name", ""}, {"client_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"},
	{"default_transaction_read_only", "off"}, {"in_hot_standby", "off"},
	{"integer_datetimes", "on"}, {"IntervalStyle", "postgres"}, {"is_superuser", "on"},
	{"server_encoding", "UTF8"}, {"server_version", "15.0"}, {"session_authorization", "postgres"},
	{"standard_conforming_strings", "on"}, {"TimeZone", "UTC"},
}

func runIdle(args []string) int {
	fs := flag.NewFlagSet("bench idle", flag.ContinueOnError)
	n := fs.Int("sessions", 2000, "idle sessions to open")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := measureIdle(context.Background(), *n); err != nil {
		fmt.Fprintln(os.Stderr, "bench idle:", err)
		return 1
	}
	return 0
}

func measureIdle(ctx context.Context, n int) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sfidle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Println("bench idle: building the proxy")
	bin, err := buildProxy(ctx, root, dir)
	if err != nil {
		return err
	}
	stub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stub.Close()
	var stubConns sync.WaitGroup
	go func() {
		for {
			c, err := stub.Accept()
			if err != nil {
				return
			}
			stubConns.Add(1)
			go func() { defer stubConns.Done(); serveStub(c) }()
		}
	}()

	port, err := freePort()
	if err != nil {
		return err
	}
	pport, err := freePort()
	if err != nil {
		return err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	pprofAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(pport))
	p, err := startProc("snowflake-proxy", filepath.Join(dir, "proxy.log"), nil, bin,
		"--listen", listen, "--upstream", stub.Addr().String(), "--log-level", "warn", "--pprof", pprofAddr)
	if err != nil {
		return err
	}
	defer p.stop()
	if err := p.waitAccept(ctx, listen); err != nil {
		return err
	}

	// One session first, so that lazily built state is in the baseline.
	warm, err := openIdle(listen)
	if err != nil {
		return fmt.Errorf("warm-up session: %w", err)
	}
	defer warm.Close()
	time.Sleep(200 * time.Millisecond)
	before, err := proxyMem(pprofAddr)
	if err != nil {
		return err
	}
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := openIdle(listen)
		if err != nil {
			return fmt.Errorf("session %d: %w", i+1, err)
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond)
	after, err := proxyMem(pprofAddr)
	if err != nil {
		return err
	}
	heap := float64(after.heap-before.heap) / float64(n)
	stack := float64(after.stack-before.stack) / float64(n)
	verdict := "ok"
	if heap+stack > idleLimit {
		verdict = "OVER the 64 KiB target"
	}
	fmt.Printf("idle sessions: %d\n", n)
	fmt.Printf("  HeapInuse  %8.1f KiB per session (%d -> %d bytes)\n", heap/1024, before.heap, after.heap)
	fmt.Printf("  StackInuse %8.1f KiB per session (%d -> %d bytes)\n", stack/1024, before.stack, after.stack)
	fmt.Printf("  total      %8.1f KiB per session (target <= 64 KiB: %s)\n", (heap+stack)/1024, verdict)
	return nil
}

// openIdle opens a client session through the proxy and waits for its
// first ReadyForQuery.
func openIdle(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b []byte
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 3<<16)
	for _, kv := range []string{"user", "postgres", "database", benchDB} {
		b = append(append(b, kv...), 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	if _, err := c.Write(b); err != nil {
		c.Close()
		return nil, err
	}
	r := bufio.NewReader(c)
	for {
		typ, body, err := readMsg(r)
		if err != nil {
			c.Close()
			return nil, err
		}
		if typ == 'E' {
			c.Close()
			return nil, fmt.Errorf("proxy refused the session: %q", body)
		}
		if typ == 'Z' {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// serveStub plays a PostgreSQL server that admits everyone: startup,
// then ReadyForQuery after every Query or Sync, until Terminate or EOF.
func serveStub(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if len(body) >= 4 && binary.BigEndian.Uint32(body) == 80877103 { // SSLRequest
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		break
	}
	var out []byte
	msg := func(typ byte, body []byte) {
		out = append(out, typ)
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)+4))
		out = append(out, body...)
	}
	msg('R', []byte{0, 0, 0, 0})
	for _, kv := range stubParams {
		msg('S', []byte(kv[0]+"\x00"+kv[1]+"\x00"))
	}
	msg('K', []byte{0, 0, 0, 1, 0, 0, 0, 2})
	msg('Z', []byte{'I'})
	if _, err := c.Write(out); err != nil {
		return
	}
	for {
		typ, _, err := readMsg(r)
		if err != nil || typ == 'X' {
			return
		}
		if typ == 'Q' || typ == 'S' {
			if _, err := c.Write([]byte{'Z', 0, 0, 0, 5, 'I'}); err != nil {
				return
			}
		}
	}
}

func readMsg(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	l := binary.BigEndian.Uint32(hdr[1:])
	if l < 4 || l > 1<<20 {
		return 0, nil, errors.New("bad message length")
	}
	body := make([]byte, l-4)
	_, err := io.ReadFull(r, body)
	return hdr[0], body, err
}

type memStats struct{ heap, stack int64 }

// proxyMem reads the proxy's MemStats from its heap profile (debug=1 ends
// with them), after a GC.
func proxyMem(addr string) (memStats, error) {
	var m memStats
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return m, fmt.Errorf("proxy pprof: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, err
	}
	heapOK, stackOK := false, false
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			m.heap, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			heapOK = err == nil
		}
		if v, ok := strings.CutPrefix(line, "# Stack = "); ok { // "# Stack = inuse / sys"
			m.stack, err = strconv.ParseInt(strings.TrimSpace(strings.SplitN(v, "/", 2)[0]), 10, 64)
			stackOK = err == nil
		}
	}
	if !heapOK || !stackOK {
		return m, errors.New("proxy pprof: no MemStats in the heap profile")
	}
	return m, nil
}
