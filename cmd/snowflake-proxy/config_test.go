package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestConfigFilePrecedence: the command line wins over SNOWFLAKE_PROXY_*,
// which wins over the config file; the file's keys are the flags' names.
func TestConfigFilePrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy.toml")
	writeConfig(t, path, `
node = 5
listen = "127.0.0.1:7000"
grace = "3s"
prepared-inserts = false
admin-listen = "127.0.0.1:9187"
log-level = "warn"
`)
	parse := func(env map[string]string, args ...string) *options {
		t.Helper()
		var errOut bytes.Buffer
		m := &Main{Stderr: &errOut, Getenv: func(k string) string { return env[k] }}
		o, err := m.parseFlags(args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return o
	}
	o := parse(nil, "--config", path)
	if o.node != 5 || o.listen != "127.0.0.1:7000" || o.grace != 3*time.Second || o.preparedInserts || o.logLevel != "warn" ||
		o.adminListen != "127.0.0.1:9187" {
		t.Fatalf("file values not applied: %+v", o)
	}
	o = parse(map[string]string{"SNOWFLAKE_PROXY_NODE": "6", "SNOWFLAKE_PROXY_CONFIG": path})
	if o.node != 6 || o.listen != "127.0.0.1:7000" {
		t.Fatalf("environment over file: node %d listen %s", o.node, o.listen)
	}
	o = parse(map[string]string{"SNOWFLAKE_PROXY_NODE": "6"}, "--config="+path, "--node", "7")
	if o.node != 7 {
		t.Fatalf("command line over environment and file: node %d", o.node)
	}
}

// TestConfigFileErrors: a bad file stops the proxy with one line naming
// the setting.
func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, content, want string }{
		{"unknown key", `nodes = 5`, `unknown setting "nodes"`},
		{"bad value", `node = "five"`, "invalid node"},
		{"node out of range", `node = 2000`, "invalid --node 2000"},
		{"table", "[node]\nvalue = 5", "want a string, number or boolean"},
		{"array", `node = [1, 2]`, "want a string, number or boolean"},
		{"not TOML", `node = = 5`, "config file"},
		{"config in config", `config = "other.toml"`, `unknown setting "config"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".toml")
			writeConfig(t, path, c.content)
			code, _, errOut := run(t, nil, "--config", path)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Fatalf("exit %d, stderr %q, want %q", code, errOut, c.want)
			}
		})
	}
	if code, _, errOut := run(t, nil, "--config", filepath.Join(dir, "missing.toml")); code == 0 || !strings.Contains(errOut, "config file") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
}

// TestSighupAppliesConfigFile: SIGHUP reads the config file again; a new
// log level takes effect at once, a setting that needs a restart is named
// in the log and left as it was (the log format too), and the proxy keeps
// serving.
func TestSighupAppliesConfigFile(t *testing.T) {
	srv := pgtest.Shared(t)
	path := filepath.Join(t.TempDir(), "proxy.toml")
	writeConfig(t, path, "log-level = \"warn\"\nupstream = \""+srv.URL("postgres")+"\"\n")
	var out, errOut pgtest.SyncBuffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" },
		Signals: make(chan os.Signal, 2), Reload: make(chan os.Signal, 1)}
	addr, stop := startMain(t, m, &out, &errOut, "--config", path)
	defer stop()
	connectOnce := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			// After max-clients = 1, the slot of the previous session
			// frees when its end is processed.
			c, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
			if err == nil {
				_ = c.Close(ctx)
				return
			}
			if !strings.Contains(err.Error(), "53300") || ctx.Err() != nil {
				t.Fatal(err)
			}
		}
	}
	connectOnce()
	if strings.Contains(errOut.String(), "session start") {
		t.Fatalf("info lines logged at level warn: %s", errOut.String())
	}
	writeConfig(t, path, "log-level = \"info\"\nupstream = \""+srv.URL("postgres")+"\"\ngrace = \"1m\"\nmax-clients = 1\nlog-format = \"json\"\nadmin-listen = \"127.0.0.1:0\"\n")
	m.Reload <- syscall.SIGHUP
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errOut.String(), "needs a restart") &&
		!strings.Contains(errOut.String(), "need a restart"); {
		if time.Now().After(deadline) {
			t.Fatalf("no reload in the log: %s", errOut.String())
		}
		<-errOut.Changed()
	}
	// The log format needs a restart: the line saying so is still text.
	if !strings.Contains(errOut.String(), `settings="[admin-listen grace log-format]"`) {
		t.Fatalf("the restart-only settings are not named: %s", errOut.String())
	}
	connectOnce()
	if !strings.Contains(errOut.String(), "session start") {
		t.Fatalf("the new log level is not applied: %s", errOut.String())
	}
	// max-clients applies live: a second session is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The slot of the session above frees when its end is processed.
	var first *pgx.Conn
	for first == nil {
		c, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
		if err != nil && (!strings.Contains(err.Error(), "53300") || ctx.Err() != nil) {
			t.Fatal(err)
		}
		first = c
	}
	defer first.Close(ctx)
	_, err := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	if err == nil || !strings.Contains(err.Error(), "53300") {
		t.Fatalf("max-clients = 1 after SIGHUP: second session got %v, want 53300", err)
	}
}

// TestExampleConfigParses keeps deploy/snowflake-proxy.toml in step with
// the flags: every key it sets (commented ones too) is a flag, and its
// values parse.
func TestExampleConfigParses(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "snowflake-proxy.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Uncomment `# key = value` lines so they are checked too.
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if k, _, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = "); ok && !strings.Contains(k, " ") {
			l = strings.TrimPrefix(l, "# ")
		}
		lines = append(lines, l)
	}
	all := filepath.Join(t.TempDir(), "all.toml")
	writeConfig(t, all, strings.Join(lines, "\n"))
	var errOut bytes.Buffer
	m := &Main{Stderr: &errOut, Getenv: func(string) string { return "" }}
	fs := m.flagSet(&options{})
	set, err := applyConfigFile(fs, all)
	if err != nil {
		t.Fatal(err)
	}
	if !set["upstream"] || !set["node"] || !set["tls-cert"] {
		t.Fatalf("example not read whole: %v", set)
	}
}
