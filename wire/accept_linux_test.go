//go:build linux

package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// emfileChildEnv, when set, makes TestAcceptEMFILE the child: a proxy in
// front of the upstream the variable names, under a low descriptor limit.
const emfileChildEnv = "WIRE_TEST_EMFILE_UPSTREAM"

// emfileSpare is how many descriptors the child may open beyond those it
// has when it lowers its limit.
const emfileSpare = 16

// Regression: with a small descriptor limit, a burst of clients made
// accept fail with EMFILE and Serve return: the port stayed in LISTEN,
// nothing was logged, and the proxy never accepted again. Now the child
// proxy logs the failure, retries, and serves a new client once the
// burst's connections are closed.
func TestAcceptEMFILE(t *testing.T) {
	if up := os.Getenv(emfileChildEnv); up != "" {
		emfileChild(t, up)
		return
	}
	srv := pgtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAcceptEMFILE$", "-test.count=1")
	cmd.Env = append(os.Environ(), emfileChildEnv+"="+srv.Addr())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var out strings.Builder
	waitLine := func(what string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("child ended before %q:\n%s", what, out.String())
				}
				out.WriteString(l + "\n")
				if strings.Contains(l, what) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("no %q from the child:\n%s", what, out.String())
			}
		}
	}
	addr := strings.TrimPrefix(waitLine("ADDR "), "ADDR ")

	// The burst: raw connections that send nothing, each holding a
	// descriptor of the child until it is closed, four times its spare.
	var burst []net.Conn
	defer func() {
		for _, c := range burst {
			_ = c.Close()
		}
	}()
	for range 4 * emfileSpare {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		burst = append(burst, c)
	}
	waitLine(`msg="accept failed: retrying"`)
	for _, c := range burst {
		_ = c.Close()
	}
	// Every connection of the burst is accepted in the end and its session
	// ends: then the descriptors are free (a client accepted among them
	// could find none left for its server connection).
	for range len(burst) {
		waitLine(`msg="session end"`)
	}
	burst = nil

	host, port, _ := net.SplitHostPort(addr)
	c, err := pgconn.Connect(ctx, "postgres://"+srv.Superuser()+"@"+host+":"+port+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatalf("a client after the burst: %v\n%s", err, out.String())
	}
	if r := c.ExecParams(ctx, "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
		t.Fatal(r.Err)
	}
	_ = c.Close(ctx)
	if !strings.Contains(out.String(), `msg="accepting again"`) {
		waitLine(`msg="accepting again"`)
	}
	_ = stdin.Close()
	for l := range lines {
		out.WriteString(l + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
}

// emfileChild runs the proxy of TestAcceptEMFILE until its stdin ends.
func emfileChild(t *testing.T, upstream string) {
	s, err := New(Config{Upstream: Upstream{Address: upstream}, EventLoops: -1,
		Logger: slog.New(slog.NewTextHandler(os.Stdout, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The limit bounds descriptor numbers, and inherited descriptors may
	// leave holes: the limit is where emfileSpare free numbers lie below.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	open := map[int]bool{}
	for _, e := range fds {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			open[n] = true
		}
	}
	limit, free := 0, 0
	for ; free < emfileSpare; limit++ {
		if !open[limit] {
			free++
		}
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(limit)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	fmt.Println("ADDR " + ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
}
