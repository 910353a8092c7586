package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// clientTLS is the TLS the proxy offers its clients, reloadable: every
// handshake takes the configuration current at that moment, so a renewed
// certificate (or CA) applies to new connections without a restart, and
// sessions already running keep theirs.
type clientTLS struct {
	current atomic.Pointer[tls.Config]
}

// newClientTLS loads the files once; nil when no certificate is set.
func newClientTLS(certFile, keyFile, caFile string) (*clientTLS, error) {
	if certFile == "" && keyFile == "" {
		if caFile != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	}
	c := &clientTLS{}
	if err := c.reload(certFile, keyFile, caFile); err != nil {
		return nil, err
	}
	return c, nil
}

// reload reads the files; on error the previous configuration stays.
func (c *clientTLS) reload(certFile, keyFile, caFile string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("cannot load TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("cannot read --tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-client-ca %s holds no PEM certificate", caFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	c.current.Store(cfg)
	return nil
}

// config is what the wire server is given: its handshakes ask for the
// current configuration.
func (c *clientTLS) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.current.Load(), nil
		},
	}
}
