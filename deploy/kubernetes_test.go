package deploy

import (
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
	if got := strings.Join(kinds, ","); got != "ConfigMap,Service,Deployment" {
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
	// The image's ENTRYPOINT is the proxy: no command, and args are its
	// flags only.
	if entry := stages[len(stages)-1].all("ENTRYPOINT"); len(entry) != 1 || entry[0] != `["/usr/local/bin/snowflake-proxy"]` {
		t.Fatalf("the image's ENTRYPOINT %q is not the proxy: the args below would not reach it", entry)
	}
	if m.block("command:") != nil {
		t.Error("a command replaces the image's ENTRYPOINT: let it run the proxy")
	}
	args := m.block("args:")
	for _, a := range args {
		if a = strings.TrimSpace(a); strings.HasPrefix(a, "- ") && !strings.HasPrefix(a, "- -") && !strings.HasPrefix(a, "- /etc/") && a != "- auto" {
			t.Errorf("args item %q is neither a flag nor its value", a)
		}
	}
	if !has(args, "- --config") || !has(args, "- /etc/snowflake-proxy/snowflake-proxy.toml") ||
		!has(args, "- --password-file") || !has(args, "- /etc/snowflake-proxy-secret/password") {
		t.Errorf("args %q: want --config and --password-file", args)
	}
	if !has(m, "mountPath: /etc/snowflake-proxy-secret") || !has(m, "mountPath: /etc/snowflake-proxy") || !has(m, "secretName: snowflake-proxy") {
		t.Error("want the ConfigMap at /etc/snowflake-proxy and the Secret at /etc/snowflake-proxy-secret")
	}
	if toml := literal(m.block("snowflake-proxy.toml: |")); !strings.Contains(toml, "upstream = ") {
		t.Errorf("ConfigMap TOML %q: want an upstream (the image has no PostgreSQL)", toml)
	}
}

// Every replica of the Deployment claims its own node (--node auto), and
// the probe that keeps a pod out of the Service until it has one is
// /readyz.
func TestKubernetesDeploymentClaimsNodes(t *testing.T) {
	m := readManifest(t)
	args := m.block("args:")
	for i, a := range args {
		if strings.TrimSpace(a) == "- --node" {
			if i+1 >= len(args) || strings.TrimSpace(args[i+1]) != "- auto" {
				t.Fatalf("args %q: --node is not followed by auto", args)
			}
			if !has(m.block("readinessProbe:"), "path: /readyz") {
				t.Fatal("no readiness probe on /readyz")
			}
			if has(m, "kind: StatefulSet") || strings.Contains(strings.Join(m, "\n"), "SNOWFLAKE_PROXY_NODE") {
				t.Fatal("a StatefulSet or a node variable beside --node auto")
			}
			return
		}
	}
	t.Fatalf("args %q: want --node auto", args)
}
