package app

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// upstream is where client sessions and control connections go.
type upstream struct {
	network    string // "tcp" or "unix"
	address    string // host:port or socket file path
	controlURL string // postgres:// URL for the proxy's own connections (database "postgres")
}

// parseUpstream accepts a postgres:// URL, host:port, or a Unix-socket
// directory (optionally "dir:port"). User and password in a URL are the
// control credentials; otherwise PGUSER or "postgres" is used.
func parseUpstream(s string) (upstream, error) {
	user := os.Getenv("PGUSER")
	if user == "" {
		user = "postgres"
	}
	switch {
	case strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://"):
		u, err := url.Parse(s)
		if err != nil {
			return upstream{}, fmt.Errorf("invalid --upstream URL: %w", err)
		}
		q := u.Query()
		if h := q.Get("host"); strings.HasPrefix(h, "/") {
			port := q.Get("port")
			if port == "" {
				port = u.Port()
			}
			return socketUpstream(h, port, u)
		}
		host := u.Hostname()
		if host == "" {
			host = "localhost"
		}
		port := u.Port()
		if port == "" {
			port = "5432"
		}
		if u.User == nil {
			u.User = url.User(user)
		}
		u.Path = "/postgres"
		if q.Get("sslmode") == "" {
			q.Set("sslmode", "disable")
			u.RawQuery = q.Encode()
		}
		return upstream{network: "tcp", address: net.JoinHostPort(host, port), controlURL: u.String()}, nil
	case strings.HasPrefix(s, "/"):
		dir, port := s, "5432"
		if i := strings.LastIndexByte(s, ':'); i > 0 {
			if _, err := strconv.Atoi(s[i+1:]); err == nil {
				dir, port = s[:i], s[i+1:]
			}
		}
		return socketUpstream(dir, port, &url.URL{User: url.User(user)})
	default:
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return upstream{}, fmt.Errorf("invalid --upstream %q: want a postgres:// URL, host:port or a Unix socket directory", s)
		}
		if _, err := strconv.Atoi(port); err != nil {
			return upstream{}, fmt.Errorf("invalid --upstream %q: bad port", s)
		}
		u := &url.URL{Scheme: "postgres", User: url.User(user), Host: net.JoinHostPort(host, port), Path: "/postgres", RawQuery: "sslmode=disable"}
		return upstream{network: "tcp", address: net.JoinHostPort(host, port), controlURL: u.String()}, nil
	}
}

func socketUpstream(dir, port string, auth *url.URL) (upstream, error) {
	if port == "" {
		port = "5432"
	}
	if _, err := strconv.Atoi(port); err != nil {
		return upstream{}, fmt.Errorf("invalid --upstream: bad port %q", port)
	}
	q := url.Values{"host": {dir}, "port": {port}, "sslmode": {"disable"}}
	u := &url.URL{Scheme: "postgres", User: auth.User, Path: "/postgres", RawQuery: q.Encode()}
	if u.User == nil {
		u.User = url.User("postgres")
	}
	return upstream{network: "unix", address: filepath.Join(dir, ".s.PGSQL."+port), controlURL: u.String()}, nil
}
