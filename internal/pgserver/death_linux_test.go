package pgserver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// holdEnv, set to a data directory path, makes this test binary start a
// server there, print its postmaster's pid, and then die as holdModeEnv says
// (see TestMain): the subject of TestServerDiesWithTheTestBinary.
const (
	holdEnv     = "SNOWFLAKE_PROXY_TEST_HOLD_SERVER"
	holdModeEnv = "SNOWFLAKE_PROXY_TEST_HOLD_MODE"
)

func TestMain(m *testing.M) {
	if data := os.Getenv(holdEnv); data != "" {
		holdServer(data, os.Getenv(holdModeEnv))
		return
	}
	os.Exit(m.Run())
}

// holdServer starts a server in the data directory data and dies without
// stopping it: by a panic, or (mode "wait") by waiting until it is killed.
func holdServer(data, mode string) {
	srv, err := pgserver.Start(context.Background(), pgserver.Options{
		DataDir: data, Settings: map[string]string{"fsync": "off"},
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	// From postmaster.pid, as any process of the machine would see it.
	b, err := os.ReadFile(filepath.Join(srv.DataDir(), "postmaster.pid"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	fmt.Printf("postmaster %s\n", first)
	if mode == "panic" {
		panic("the test binary dies with its server running")
	}
	select {} // until killed
}

// A test binary that dies (killed, or panicking as on a test timeout)
// leaves no PostgreSQL running: its servers are its children, told to
// shut down when it dies. The test runs this test binary in the helper
// mode of TestMain, which starts a server and dies without stopping it,
// and waits, with a deadline, for that postmaster to be gone.
func TestServerDiesWithTheTestBinary(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"kill", "panic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			data := dataDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), holdEnv+"="+data, holdModeEnv+"="+mode)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "postmaster ") {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("helper: %q, %v; stderr: %s", line, err, stderr.String())
			}
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "postmaster ")))
			if err != nil || pid <= 0 {
				t.Fatalf("helper printed %q", line)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGQUIT) }) // if the test fails
			if !alive(pid) {
				t.Fatalf("postmaster %d is not running while the helper lives", pid)
			}
			if mode == "kill" {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			werr := cmd.Wait()
			if werr == nil {
				t.Fatalf("the helper exited normally; stderr: %s", stderr.String())
			}
			if mode == "panic" && !strings.Contains(stderr.String(), "the test binary dies with its server running") {
				t.Fatalf("the helper did not die of its panic (%v): %s", werr, stderr.String())
			}
			deadline := time.Now().Add(time.Minute)
			for alive(pid) {
				if time.Now().After(deadline) {
					t.Fatalf("postmaster %d still runs a minute after its test binary died (%v)", pid, werr)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); !os.IsNotExist(err) {
				t.Fatalf("postmaster.pid is still there (%v): the server did not shut down cleanly", err)
			}
		})
	}
}

// alive reports whether pid names a process that has not exited (a zombie,
// exited but not yet reaped by its new parent, counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}
