package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// runUntilListening starts the proxy with env and args, waits for its
// listen line, stops it with SIGTERM and returns what it wrote on stderr.
func runUntilListening(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	var out, errOut pgtest.SyncBuffer
	m := &Main{Stdout: &out, Stderr: &errOut, Signals: make(chan os.Signal, 2),
		Getenv: func(k string) string { return env[k] }}
	done := make(chan int, 1)
	go func() { done <- m.Run(context.Background(), args) }()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for !strings.Contains(out.String(), "listening on ") {
		select {
		case code := <-done:
			t.Fatalf("exited %d before listening: %s", code, errOut.String())
		case <-out.Changed():
		case <-deadline.C:
			t.Fatalf("no listen line: stdout %q stderr %q", out.String(), errOut.String())
		}
	}
	m.Signals <- syscall.SIGTERM
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM: %s", code, errOut.String())
		}
	case <-deadline.C:
		t.Fatal("no exit after SIGTERM")
	}
	return errOut.String()
}

// --log-format json makes every stderr line a JSON object with level and
// msg; text stays key=value. Without a node anywhere the proxy still
// starts but warns, once, that snowflake.nextval() will fail with F0000.
func TestLogFormatAndNoNodeWarning(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, c := range []struct {
		name     string
		env      map[string]string
		format   string
		wantWarn bool
	}{
		{"text without node", nil, "text", true},
		{"json without node", nil, "json", true},
		{"json with node from env", map[string]string{"SNOWFLAKE_PROXY_NODE": "3"}, "json", false},
		{"text with node from env", map[string]string{"SNOWFLAKE_PROXY_NODE": "3"}, "text", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			errOut := runUntilListening(t, c.env, "--upstream", srv.URL("postgres"), "--listen", "127.0.0.1:0",
				"--log-level", "debug", "--log-format", c.format)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			// At least the debug "runtime" line and "shutting down".
			if len(lines) < 2 {
				t.Fatalf("stderr %q: want at least two log lines", errOut)
			}
			warnings := 0
			for _, line := range lines {
				var level, msg string
				if c.format == "json" {
					var rec map[string]any
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("line %q is not JSON: %v", line, err)
					}
					level, _ = rec["level"].(string)
					msg, _ = rec["msg"].(string)
					if level == "" || msg == "" {
						t.Fatalf("line %q: want string level and msg", line)
					}
				} else {
					if strings.HasPrefix(line, "{") || !strings.Contains(line, " level=") || !strings.Contains(line, " msg=") {
						t.Fatalf("line %q: want slog text (time=... level=... msg=...)", line)
					}
					level = strings.Fields(strings.SplitN(line, " level=", 2)[1])[0]
					msg = strings.SplitN(line, " msg=", 2)[1]
				}
				if strings.Contains(msg, "no --node") {
					warnings++
					if level != "WARN" || !strings.Contains(msg, "F0000") || !strings.Contains(msg, "snowflake.node") {
						t.Fatalf("node warning %q at %s: want WARN naming F0000 and snowflake.node", msg, level)
					}
				}
			}
			if want := map[bool]int{true: 1, false: 0}[c.wantWarn]; warnings != want {
				t.Fatalf("%d node warnings, want %d: %s", warnings, want, errOut)
			}
		})
	}
}
