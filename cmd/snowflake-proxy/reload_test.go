package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgtest"
)

// startMain runs the command with args in front of the shared server and
// returns the address it listens on and a function that stops it.
func startMain(t *testing.T, m *Main, out, errOut *pgtest.SyncBuffer, args ...string) (addr string, stop func()) {
	t.Helper()
	srv := pgtest.Shared(t)
	return runMain(t, m, out, errOut, append([]string{"--listen", "127.0.0.1:0", "--upstream", srv.URL("postgres")}, args...)...)
}

// runMain runs the command with args until its ready line and returns the
// address it listens on and a function that stops it (SIGTERM, exit 0).
func runMain(t *testing.T, m *Main, out, errOut *pgtest.SyncBuffer, args ...string) (addr string, stop func()) {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		done <- m.Run(context.Background(), args)
	}()
	for deadline := time.Now().Add(60 * time.Second); addr == "" && time.Now().Before(deadline); {
		select {
		case code := <-done:
			t.Fatalf("exited %d: %s", code, errOut.String())
		case <-out.Changed():
		case <-time.After(time.Until(deadline)):
		}
		if s := out.String(); strings.Contains(s, "listening on ") {
			addr = strings.Fields(strings.SplitN(s, "listening on ", 2)[1])[0]
		}
	}
	if addr == "" {
		t.Fatalf("no listen line: %q", out.String())
	}
	return addr, func() {
		m.Signals <- syscall.SIGTERM
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("exit %d: %s", code, errOut.String())
			}
		case <-time.After(60 * time.Second):
			t.Error("no exit after SIGTERM")
		}
	}
}

// serverCertOf connects over TLS and returns the serial number of the
// certificate the proxy presented.
func serverCertOf(t *testing.T, addr string, clientCert *tls.Certificate) (string, error) {
	t.Helper()
	cfg, err := pgconn.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	serial := ""
	cfg.TLSConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		serial = cs.PeerCertificates[0].SerialNumber.String()
		return nil
	}
	if clientCert != nil {
		cfg.TLSConfig.Certificates = []tls.Certificate{*clientCert}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if r := c.ExecParams(ctx, "SELECT 1", nil, nil, nil, nil).Read(); r.Err != nil {
		return "", r.Err
	}
	return serial, nil
}

func serialOf(t *testing.T, p pgtest.Pair) string {
	c := p.TLS(t)
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.SerialNumber.String()
}

// TestSighupReloadsCertificate: SIGHUP never stops the proxy (closing the
// terminal sends it); it reads the client TLS certificate again, so new
// connections get the renewed one while the proxy keeps serving. A
// broken file leaves the previous certificate in force. Regression: SIGHUP
// killed the proxy at once, without a drain.
func TestSighupReloadsCertificate(t *testing.T) {
	ca := pgtest.NewCA(t, "reload CA")
	dir := t.TempDir()
	first := ca.Server(t, "127.0.0.1")
	certFile, keyFile := first.WriteFiles(t, dir, "proxy")
	var out, errOut pgtest.SyncBuffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" },
		Signals: make(chan os.Signal, 2), Reload: make(chan os.Signal, 1)}
	addr, stop := startMain(t, m, &out, &errOut, "--tls-cert", certFile, "--tls-key", keyFile)
	defer stop()
	if got, err := serverCertOf(t, addr, nil); err != nil || got != serialOf(t, first) {
		t.Fatalf("first certificate: serial %s, err %v", got, err)
	}
	second := ca.Server(t, "127.0.0.1")
	second.WriteFiles(t, dir, "proxy")
	m.Reload <- syscall.SIGHUP
	want := serialOf(t, second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := serverCertOf(t, addr, nil)
		if err != nil {
			t.Fatalf("after SIGHUP: %v", err)
		}
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate is not served after SIGHUP")
		}
	}
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Reload <- syscall.SIGHUP
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(errOut.String(), "reload failed"); {
		if time.Now().After(deadline) {
			t.Fatalf("a failed reload is not logged: %s", errOut.String())
		}
		<-errOut.Changed()
	}
	if got, err := serverCertOf(t, addr, nil); err != nil || got != want {
		t.Fatalf("after a failed reload: serial %s (want %s), err %v", got, want, err)
	}
}

// TestTLSRequireAndClientCA: --tls-require refuses plaintext clients with
// 28000; --tls-client-ca refuses TLS clients without a certificate of
// that CA.
func TestTLSRequireAndClientCA(t *testing.T) {
	ca := pgtest.NewCA(t, "client CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t, "127.0.0.1").WriteFiles(t, dir, "proxy")
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut pgtest.SyncBuffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" },
		Signals: make(chan os.Signal, 2), Reload: make(chan os.Signal, 1)}
	addr, stop := startMain(t, m, &out, &errOut, "--tls-cert", certFile, "--tls-key", keyFile,
		"--tls-require", "--tls-client-ca", caFile)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := pgconn.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28000" || !strings.Contains(pe.Message, "TLS required") {
		t.Fatalf("plaintext client: want 28000 TLS required, got %v", err)
	}
	if _, err := serverCertOf(t, addr, nil); err == nil {
		t.Fatal("a TLS client without a certificate was accepted")
	}
	other := pgtest.NewCA(t, "other CA").Client(t, "postgres").TLS(t)
	if _, err := serverCertOf(t, addr, &other); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	good := ca.Client(t, "postgres").TLS(t)
	if _, err := serverCertOf(t, addr, &good); err != nil {
		t.Fatalf("a client certificate of the CA was refused: %v", err)
	}
}
