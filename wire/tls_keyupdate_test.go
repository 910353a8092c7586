package wire

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// A TLS 1.3 client updates its keys and asks the proxy to update its own
// (KeyUpdate with update_requested), as long-lived sessions of some TLS
// stacks do: crypto/tls answers from inside the read that met the
// request, so the answer is written by the loop thread (or the pump) in
// the middle of relaying the client's records. The client is OpenSSL's
// s_client, whose command "K" sends the update with its next record.
// Relayed by an event loop and by the goroutines, the statements after
// the update get their answers, read with the client's new keys.
func TestTLSClientKeyUpdate(t *testing.T) {
	openssl := pgtest.Tool(t, "openssl")
	srv := pgtest.Shared(t)
	forTLSRelays(t, func(t *testing.T, base Config) {
		base.TLSConfig = selfSigned(t)
		p := startProxy(t, srv, base)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// -quiet leaves only the relayed bytes on stdout; -no_ign_eof
		// keeps the commands (a line "K") that -quiet turns off; -msg
		// writes the handshake messages of both directions to msgs.
		msgs := filepath.Join(t.TempDir(), "msgs")
		cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", p.addr, "-starttls", "postgres",
			"-tls1_3", "-quiet", "-no_ign_eof", "-msg", "-msgfile", msgs)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := &pgtest.SyncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = stdin.Close()
			_ = cmd.Wait()
		}()
		fe := pgproto3.NewFrontend(bufio.NewReader(stdout), io.Discard)
		// Each write below is read by s_client as one chunk: it waits for
		// the answer before the next. A chunk that begins with a command
		// letter (Q, R, k, K) is taken as that command: the startup
		// message begins with its length, and the statements are sent
		// with the extended protocol (Parse, 'P').
		startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
			Parameters: map[string]string{"user": srv.Superuser(), "database": "postgres"}}).Encode(nil)
		send(t, stdin, startup)
		untilReady(t, fe, stderr)
		checkTLSRelay(t, p, base, nil)
		for i, marker := range []string{"before the update", "after the first update", "after the second update"} {
			if i > 0 {
				send(t, stdin, []byte("K\n"))
				waitUntil(t, "s_client's key update", func() bool {
					return strings.Count(stderr.String(), "KEYUPDATE") == i
				})
			}
			var q []byte
			q, _ = (&pgproto3.Parse{Query: "SELECT '" + marker + "'::text"}).Encode(q)
			q, _ = (&pgproto3.Bind{}).Encode(q)
			q, _ = (&pgproto3.Execute{}).Encode(q)
			q, _ = (&pgproto3.Sync{}).Encode(q)
			send(t, stdin, q)
			if got := untilReady(t, fe, stderr); !bytes.Equal(got, []byte(marker)) {
				t.Fatalf("statement %d: got %q, want %q", i, got, marker)
			}
		}
		if p.Stats().Active != 1 {
			t.Fatalf("%d active sessions, want the one", p.Stats().Active)
		}
		// Each update asked for the proxy's: two KeyUpdates each way.
		b, err := os.ReadFile(msgs)
		if err != nil {
			t.Fatal(err)
		}
		sent, answered := 0, 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "KeyUpdate") {
				switch {
				case strings.HasPrefix(line, ">>>"):
					sent++
				case strings.HasPrefix(line, "<<<"):
					answered++
				}
			}
		}
		if sent != 2 || answered != 2 {
			t.Fatalf("KeyUpdate messages: %d sent, %d from the proxy; want 2 and 2:\n%s", sent, answered, b)
		}
	})
}

func send(t *testing.T, w io.Writer, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}

// untilReady reads backend messages until ReadyForQuery and returns the
// first column of the last DataRow; an ErrorResponse or the end of the
// stream fails the test, with s_client's error output.
func untilReady(t *testing.T, fe *pgproto3.Frontend, stderr *pgtest.SyncBuffer) []byte {
	t.Helper()
	var val []byte
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("receive: %v\ns_client:\n%s", err, stderr)
		}
		switch m := m.(type) {
		case *pgproto3.DataRow:
			val = bytes.Clone(m.Values[0])
		case *pgproto3.ErrorResponse:
			t.Fatalf("error: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return val
		}
	}
}
