package wire

import (
	"context"
	"crypto/tls"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestTLSRecordLayers: sessions with TLS on both sides, client TLS 1.3
// or 1.2 and server TLS 1.3 or 1.2, relayed by each way of relaying.
// A TLS 1.3 side's records are the proxy's own from the first message
// after its handshake, a TLS 1.2 side's stay crypto/tls's, and the log
// says which; messages of every size (many in one record, one over many
// records both ways, pipelined) come through whole, on a server that
// takes only TLS.
func TestTLSRecordLayers(t *testing.T) {
	s := upstreamServers(t)
	versions := []struct {
		name  string
		max   uint16
		layer string
	}{{"1.3", tls.VersionTLS13, "own TLS 1.3"}, {"1.2", tls.VersionTLS12, "crypto/tls"}}
	forTLSRelays(t, func(t *testing.T, base Config) {
		for _, cv := range versions {
			for _, sv := range versions {
				t.Run("client"+cv.name+"/server"+sv.name, func(t *testing.T) {
					up := verifying(s.ca, "localhost")
					up.MaxVersion = sv.max
					p, logs := tlsProxy(t, base, s.hostssl, TLSRequire, up, selfSigned(t))
					cfg, err := pgconn.ParseConfig(strings.Replace(p.userURL("postgres", tlsPassword, "postgres"), "sslmode=disable", "sslmode=require&channel_binding=disable", 1))
					if err != nil {
						t.Fatal(err)
					}
					cfg.TLSConfig.MaxVersion = cv.max
					c, err := pgconn.ConnectConfig(ctxT(t), cfg)
					if err != nil {
						t.Fatalf("connect: %v\n%s", err, logs)
					}
					defer c.Close(context.Background())
					exchangeAllSizes(t, c, sv.name)
					checkTLSRelay(t, p, base, logs)
					for side, want := range map[string]string{"client_tls": cv.layer, "server_tls": sv.layer} {
						attr := regexp.MustCompile(side + `="(TLS [^"]*)"`)
						var m []string
						waitUntil(t, "the log line of the session's relay", func() bool {
							m = attr.FindStringSubmatch(logs.String())
							return m != nil
						})
						if !strings.HasSuffix(m[1], "records: "+want) {
							t.Fatalf("%s: %s, want records: %s", side, m[1], want)
						}
					}
				})
			}
		}
	})
}

// exchangeAllSizes runs statements whose messages are small, larger than
// a record (both ways) and pipelined, and checks their answers; the
// server's TLS version must be serverVersion.
func exchangeAllSizes(t *testing.T, c *pgconn.PgConn, serverVersion string) {
	t.Helper()
	r := c.ExecParams(ctxT(t), "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()", nil, nil, nil, nil).Read()
	if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != "TLSv"+serverVersion {
		t.Fatalf("pg_stat_ssl.version: %v %v, want TLSv%s", r.Rows, r.Err, serverVersion)
	}
	big := strings.Repeat("0123456789abcdef", 5000) // 80,000 bytes: five records and more
	r = c.ExecParams(ctxT(t), "SELECT md5($1), length($1), repeat($1, 2)", [][]byte{[]byte(big)}, nil, nil, nil).Read()
	if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][1]) != "80000" || string(r.Rows[0][2]) != big+big {
		t.Fatalf("a value over many records: %v", r.Err)
	}
	for i := range 200 {
		res, err := c.Exec(ctxT(t), "SELECT 1; SELECT 'x'").ReadAll()
		if err != nil || len(res) != 2 || string(res[1].Rows[0][0]) != "x" {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	batch := &pgconn.Batch{}
	for i := range 300 {
		batch.ExecParams("SELECT $1::int + 1", [][]byte{[]byte(strings.Repeat("1", 1+i%5))}, nil, nil, nil)
	}
	res, err := c.ExecBatch(ctxT(t), batch).ReadAll()
	if err != nil || len(res) != 300 {
		t.Fatalf("pipeline: %d results, %v", len(res), err)
	}
	if got := string(res[299].Rows[0][0]); got != "11112" {
		t.Fatalf("pipeline's last answer %q, want 11112", got)
	}
}
