package deploy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

// stage is one FROM and what follows it.
type stage struct {
	from, name string
	ins        []instruction
}

func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// parseDockerfile splits the Dockerfile into stages; comments and blank
// lines go, backslash continuations are joined.
func parseDockerfile(t *testing.T, text string) []stage {
	t.Helper()
	var stages []stage
	var pending string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && pending == "") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			pending += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		full := strings.TrimSpace(pending + trimmed)
		pending = ""
		cmd, args, _ := strings.Cut(full, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("instruction %q before any FROM", full)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if pending != "" {
		t.Fatalf("Dockerfile ends in a continuation: %q", pending)
	}
	return stages
}

// readmeBuildCommand is the one `go build` line of the README's shell
// blocks: the image must build the way the README tells people to.
func readmeBuildCommand(t *testing.T) string {
	t.Helper()
	return readmeCommand(t, "go build ")
}

// readmeCommand is the one line starting with prefix in the README's
// code blocks.
func readmeCommand(t *testing.T, prefix string) string {
	t.Helper()
	var found []string
	inBlock := false
	for _, line := range strings.Split(readFile(t, "../README.md"), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock && strings.HasPrefix(line, prefix) {
			found = append(found, strings.TrimSpace(line))
		}
	}
	if len(found) != 1 {
		t.Fatalf("README has %d %q lines in code blocks, want exactly one: %q", len(found), prefix, found)
	}
	return found[0]
}

// CI runs the test command the README gives, to the letter: a user and CI
// run the same thing. Regression: the README said `go test ./...` while
// .ci/run ran it with -count=1 -timeout 25m.
func TestCIRunsTheREADMEsTestCommand(t *testing.T) {
	want := readmeCommand(t, "go test ")
	var runs []string
	for _, line := range strings.Split(readFile(t, "../.ci/run"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "go test") {
			runs = append(runs, strings.TrimSpace(line))
		}
	}
	if len(runs) != 1 || runs[0] != want {
		t.Fatalf(".ci/run runs %q, the README says %q", runs, want)
	}
}

// debianRelease is the Debian code name in an image reference such as
// golang:1.26-bookworm or debian:bookworm-slim.
func debianRelease(image string) string {
	for _, r := range []string{"bullseye", "bookworm", "trixie", "forky"} {
		if strings.Contains(image, r) {
			return r
		}
	}
	return ""
}

// envOf returns the ENV settings of a stage, in the KEY=VALUE form.
func envOf(t *testing.T, s stage) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, args := range s.all("ENV") {
		for _, kv := range strings.Fields(args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("ENV %q: use the KEY=VALUE form", args)
			}
			env[k] = v
		}
	}
	return env
}

func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	build, final := stages[0], stages[1]
	if !strings.HasPrefix(build.from, "golang:") || build.name == "" {
		t.Fatalf("build stage FROM %q AS %q: want a named golang image", build.from, build.name)
	}
	want := readmeBuildCommand(t)
	runs := build.all("RUN")
	if len(runs) == 0 || runs[len(runs)-1] != want {
		t.Fatalf("build stage's last RUN %q, want the README's build command %q", runs, want)
	}
	// The binary is cgo and links glibc dynamically: the runtime's glibc
	// must be the build's or newer, which the same Debian release ensures.
	if r := debianRelease(build.from); r == "" || r != debianRelease(final.from) {
		t.Fatalf("build FROM %q, runtime FROM %q: want one Debian release for both (glibc)", build.from, final.from)
	}
	copied := false
	for _, c := range final.all("COPY") {
		copied = copied || c == "--from="+build.name+" /src/snowflake-proxy /usr/local/bin/snowflake-proxy"
	}
	if !copied {
		t.Fatalf("runtime stage COPY %q: want the build stage's binary at /usr/local/bin/snowflake-proxy", final.all("COPY"))
	}

	users := final.all("USER")
	if len(users) == 0 {
		t.Fatal("runtime stage has no USER: it would run as root")
	}
	user, _, _ := strings.Cut(users[len(users)-1], ":")
	if user == "root" || user == "0" || user == "" {
		t.Fatalf("runtime stage USER %q: want a non-root user", users[len(users)-1])
	}
	if got := final.all("ENTRYPOINT"); len(got) != 1 || got[0] != `["/usr/local/bin/snowflake-proxy"]` {
		t.Fatalf("ENTRYPOINT %q", got)
	}
	exposed := map[string]bool{}
	for _, e := range final.all("EXPOSE") {
		for _, p := range strings.Fields(e) {
			exposed[p] = true
		}
	}
	env := envOf(t, final)
	if env["SNOWFLAKE_PROXY_LISTEN"] != "0.0.0.0:6432" || !exposed["6432"] {
		t.Fatalf("listen %q, EXPOSE %v: want 0.0.0.0:6432, exposed", env["SNOWFLAKE_PROXY_LISTEN"], exposed)
	}
	if env["SNOWFLAKE_PROXY_ADMIN_LISTEN"] != "0.0.0.0:9090" || !exposed["9090"] {
		t.Fatalf("admin listen %q, EXPOSE %v: want 0.0.0.0:9090, exposed", env["SNOWFLAKE_PROXY_ADMIN_LISTEN"], exposed)
	}
	if hc := healthcheck(t, final); hc[0] != "/bin/bash" {
		t.Fatalf("HEALTHCHECK runs %q: the runtime image's bash is what it relies on", hc[0])
	}
}

// healthcheck returns the runtime stage's HEALTHCHECK command (exec form).
func healthcheck(t *testing.T, final stage) []string {
	t.Helper()
	hcs := final.all("HEALTHCHECK")
	if len(hcs) != 1 {
		t.Fatalf("%d HEALTHCHECKs in the runtime stage, want one", len(hcs))
	}
	_, form, ok := strings.Cut(hcs[0], "CMD ")
	if !ok || !strings.Contains(hcs[0], "--timeout=") {
		t.Fatalf("HEALTHCHECK %q: want options with --timeout, then CMD", hcs[0])
	}
	var argv []string
	if err := json.Unmarshal([]byte(form), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("HEALTHCHECK CMD %q is not the exec form (a JSON array): %v", form, err)
	}
	return argv
}

// The HEALTHCHECK command itself, run here against an HTTP server in
// place of the proxy's admin listener: healthy only on a 200 for
// /healthz.
func TestHealthcheckCommand(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash not found: the HEALTHCHECK is a bash command")
	}
	argv := healthcheck(t, parseDockerfile(t, readFile(t, "Dockerfile"))[1])
	if !strings.Contains(argv[len(argv)-1], "/dev/tcp/127.0.0.1/9090") {
		t.Fatalf("HEALTHCHECK %q does not ask 127.0.0.1:9090", argv)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, c := range []struct {
		name    string
		url     string
		healthy bool
	}{
		{"200", serve(t, http.StatusOK), true},
		{"503", serve(t, http.StatusServiceUnavailable), false},
		{"nothing listening", downURL, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := c.url[strings.LastIndex(c.url, ":")+1:]
			args := append([]string{}, argv[1:]...)
			args[len(args)-1] = strings.Replace(args[len(args)-1], "/9090", "/"+port, 1)
			cmd := exec.Command(argv[0], args...)
			done := make(chan error, 1)
			out := &strings.Builder{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if healthy := err == nil; healthy != c.healthy {
					t.Fatalf("healthy %v (%v, %q), want %v", healthy, err, out, c.healthy)
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatal("the HEALTHCHECK command did not finish")
			}
		})
	}
}

// serve starts an HTTP server answering /healthz with code, and 404
// elsewhere.
func serve(t *testing.T, code int) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// parseUnit returns the unit file's settings by section; a key given
// more than once (SystemCallFilter=...) keeps every value.
func parseUnit(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	sections := map[string]map[string][]string{}
	var cur map[string][]string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = map[string][]string{}
			sections[line[1:len(line)-1]] = cur
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == nil || strings.HasSuffix(line, "\\") {
				t.Fatalf("line %d %q: want Key=value inside a section, on one line", i+1, line)
			}
			cur[k] = append(cur[k], v)
		}
	}
	return sections
}

func TestSystemdUnit(t *testing.T) {
	unit := parseUnit(t, readFile(t, "snowflake-proxy.service"))
	svc := unit["Service"]
	if svc == nil || unit["Unit"] == nil || unit["Install"] == nil {
		t.Fatalf("sections %v: want Unit, Service and Install", unit)
	}
	one := func(key string) string {
		t.Helper()
		if len(svc[key]) != 1 {
			t.Fatalf("%s given %d times, want once", key, len(svc[key]))
		}
		return svc[key][0]
	}
	exec := strings.Fields(one("ExecStart"))
	if !strings.HasPrefix(exec[0], "/") || !strings.HasSuffix(exec[0], "/snowflake-proxy") {
		t.Fatalf("ExecStart runs %q: want the absolute path of snowflake-proxy", exec[0])
	}
	flags := map[string]string{}
	for i := 1; i < len(exec); i++ {
		if strings.HasPrefix(exec[i], "--") && i+1 < len(exec) && !strings.HasPrefix(exec[i+1], "--") {
			flags[exec[i]] = exec[i+1]
			i++
		}
	}
	if flags["--config"] != "/etc/snowflake-proxy/snowflake-proxy.toml" {
		t.Fatalf("ExecStart %q: want --config /etc/snowflake-proxy/snowflake-proxy.toml", exec)
	}
	// The dynamic user cannot read a root-only password file: it gets it
	// as a credential, and the flag must name the credential's copy.
	for _, cred := range svc["LoadCredential"] {
		id, _, _ := strings.Cut(cred, ":")
		if id == "password" && flags["--password-file"] != "%d/password" {
			t.Fatalf("LoadCredential %q but --password-file %q: want %%d/password", cred, flags["--password-file"])
		}
	}
	if got := one("ExecReload"); got != "/bin/kill -HUP $MAINPID" {
		t.Fatalf("ExecReload %q: the proxy reloads on SIGHUP", got)
	}
	// Past --grace (10s by default), or systemd kills the sessions first.
	if d, err := time.ParseDuration(one("TimeoutStopSec")); err != nil || d <= 10*time.Second {
		t.Fatalf("TimeoutStopSec %q: want a duration longer than the default --grace 10s", one("TimeoutStopSec"))
	}
	if one("DynamicUser") != "yes" && (one("User") == "" || one("User") == "root") {
		t.Fatal("want DynamicUser=yes or a dedicated User")
	}
	for _, c := range []struct{ key, want string }{
		{"Restart", "on-failure"},
		{"NoNewPrivileges", "yes"},
		{"ProtectSystem", "strict"},
		{"ProtectHome", "yes"},
		{"PrivateTmp", "yes"},
		{"PrivateDevices", "yes"},
		{"RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"},
		{"CapabilityBoundingSet", ""},
		{"LockPersonality", "yes"},
		{"MemoryDenyWriteExecute", "yes"},
		{"SystemCallFilter", "@system-service"},
	} {
		if got, ok := svc[c.key]; !ok || got[0] != c.want {
			t.Errorf("%s=%q, want %q", c.key, got, c.want)
		}
	}
}
