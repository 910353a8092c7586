package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// manifest is kubernetes.yaml as lines, checked by matching lines and
// indentation: the module has no YAML parser, and these checks do not
// justify adding one.
type manifest []string

func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// block returns the lines indented under the first line whose trimmed
// text is key, or nil when there is none.
func (m manifest) block(key string) []string {
	for i, line := range m {
		if strings.TrimSpace(line) != key {
			continue
		}
		var out []string
		for _, l := range m[i+1:] {
			if strings.TrimSpace(l) != "" && indent(l) <= indent(line) {
				break
			}
			out = append(out, l)
		}
		return out
	}
	return nil
}

// literal returns the text of a `|` block scalar: its lines without the
// indentation of the first one.
func literal(lines []string) string {
	var b strings.Builder
	cut := -1
	for _, l := range lines {
		if cut < 0 && strings.TrimSpace(l) != "" {
			cut = indent(l)
		}
		if len(l) >= cut && cut >= 0 {
			l = l[cut:]
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

func has(lines []string, want string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	text := readFile(t, "kubernetes.yaml")
	if strings.Contains(text, "\t") {
		t.Fatal("kubernetes.yaml has a tab: YAML indents with spaces")
	}
	return strings.Split(text, "\n")
}

func TestKubernetesManifest(t *testing.T) {
	m := readManifest(t)
	var kinds []string
	for _, l := range m {
		if strings.HasPrefix(l, "kind: ") {
			kinds = append(kinds, strings.TrimPrefix(l, "kind: "))
		}
	}
	if got := strings.Join(kinds, ","); got != "ConfigMap,Service,Service,StatefulSet" {
		t.Fatalf("kinds %s", got)
	}
	if !has(m, "replicas: 3") {
		t.Fatal("want replicas: 3")
	}
	for _, c := range []struct{ probe, path string }{{"readinessProbe:", "path: /readyz"}, {"livenessProbe:", "path: /healthz"}} {
		b := m.block(c.probe)
		if !has(b, "httpGet:") || !has(b, c.path) || !has(b, "port: admin") {
			t.Errorf("%s %q: want httpGet %s on the admin port", c.probe, b, c.path)
		}
	}
	// The ports the probes and Services name are the image's.
	ports := m.block("ports:")
	for _, want := range []string{"- name: postgres", "containerPort: 6432", "- name: admin", "containerPort: 9090"} {
		if !has(m, want) {
			t.Errorf("no %q in the manifest", want)
		}
	}
	if !has(ports, "targetPort: postgres") {
		t.Errorf("Service ports %q: want targetPort postgres", ports)
	}
	stages := parseDockerfile(t, readFile(t, "Dockerfile"))
	user, _, _ := strings.Cut(stages[len(stages)-1].all("USER")[0], ":")
	if !has(m, "runAsUser: "+user) || !has(m, "runAsNonRoot: true") {
		t.Errorf("want runAsNonRoot and runAsUser %s, the image's USER", user)
	}
	args := m.block("args:")
	if !has(args, "- /usr/local/bin/snowflake-proxy") || !has(args, "- --config") || !has(args, "- /etc/snowflake-proxy/snowflake-proxy.toml") ||
		!has(args, "- --password-file") || !has(args, "- /etc/snowflake-proxy-secret/password") {
		t.Errorf("args %q: want the proxy with --config and --password-file", args)
	}
	if !has(m, "mountPath: /etc/snowflake-proxy-secret") || !has(m, "mountPath: /etc/snowflake-proxy") || !has(m, "secretName: snowflake-proxy") {
		t.Error("want the ConfigMap at /etc/snowflake-proxy and the Secret at /etc/snowflake-proxy-secret")
	}
	if toml := literal(m.block("snowflake-proxy.toml: |")); !strings.Contains(toml, "upstream = ") {
		t.Errorf("ConfigMap TOML %q: want an upstream (the image has no PostgreSQL)", toml)
	}
}

// The container's wrapper gives each StatefulSet pod its node from the
// ordinal in its name, and refuses a name without one instead of starting
// nodeless.
func TestKubernetesNodeFromOrdinal(t *testing.T) {
	m := readManifest(t)
	command := m.block("command:")
	if len(command) < 4 || strings.TrimSpace(command[0]) != "- /bin/sh" || strings.TrimSpace(command[1]) != "- -c" || strings.TrimSpace(command[2]) != "- |" {
		t.Fatalf("command %q: want /bin/sh -c and a literal script", command)
	}
	script := literal(manifest(command).block("- |"))
	for _, c := range []struct {
		name, pod, offset string
		want              string
		ok                bool
	}{
		{"first pod", "snowflake-proxy-0", "", "1", true},
		{"third pod", "snowflake-proxy-2", "0", "3", true},
		{"with offset", "snowflake-proxy-2", "100", "103", true},
		{"no ordinal", "snowflake-proxy", "", "", false},
		{"no dash", "proxy", "", "", false},
		{"empty name", "", "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The script execs its arguments: here a shell that prints the
			// node the proxy would be given.
			cmd := exec.Command("/bin/sh", "-c", script, "node-from-ordinal", "/bin/sh", "-c", `printf %s "$SNOWFLAKE_PROXY_NODE"`)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "POD_NAME=" + c.pod}
			if c.offset != "" {
				cmd.Env = append(cmd.Env, "NODE_OFFSET="+c.offset)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if c.ok && (err != nil || string(out) != c.want) {
				t.Fatalf("node %q, err %v (%s), want %s", out, err, stderr.String(), c.want)
			}
			if !c.ok && (err == nil || !strings.Contains(stderr.String(), "no ordinal")) {
				t.Fatalf("pod %q: err %v, stderr %q: want a failure naming the missing ordinal", c.pod, err, stderr.String())
			}
		})
	}
}
