package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/snowflake-proxy/snowflake-proxy/internal/pgserver"
)

// CA is a certificate authority made for one test: nothing is committed,
// every certificate is generated when the test runs.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// Pair is a certificate issued by a CA, with its key, both PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// TLS returns p as a tls.Certificate.
func (p Pair) TLS(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

var serial = big.NewInt(time.Now().UnixNano())

func nextSerial() *big.Int {
	serial = new(big.Int).Add(serial, big.NewInt(1))
	return serial
}

// NewCA makes a CA named name.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Server issues a server certificate for names (DNS names or IP
// addresses).
func (ca *CA) Server(tb testing.TB, names ...string) Pair {
	tb.Helper()
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: names[0]}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return ca.issue(tb, tmpl)
}

// Client issues a client certificate whose common name is user (what
// PostgreSQL's cert authentication compares with the role).
func (ca *CA) Client(tb testing.TB, user string) Pair {
	tb.Helper()
	return ca.issue(tb, &x509.Certificate{Subject: pkix.Name{CommonName: user}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(tb testing.TB, tmpl *x509.Certificate) Pair {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl.SerialNumber = nextSerial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// WriteFiles writes p into dir as name.crt and name.key (mode 0600) and
// returns their paths.
func (p Pair) WriteFiles(tb testing.TB, dir, name string) (certFile, keyFile string) {
	tb.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

// StartTLS starts a dedicated server with ssl = on, serving cert, trusting
// client certificates of ca. o.HBA and o.Settings apply as in Start.
func StartTLS(tb testing.TB, o pgserver.Options, ca *CA, cert Pair) *pgserver.Server {
	tb.Helper()
	// Not tb.TempDir: its parent is private to the test's user, and the
	// server's OS user must reach these files.
	dir, err := os.MkdirTemp("", "pgtest-tls-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	certFile, keyFile := cert.WriteFiles(tb, dir, "server")
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// The server runs as its own OS user and insists on owning its
		// key.
		runAs := o.RunAs
		if runAs == "" {
			runAs = "postgres"
		}
		u, err := user.Lookup(runAs)
		if err != nil {
			tb.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, certFile, keyFile, caFile} {
			if err := os.Chown(p, uid, gid); err != nil {
				tb.Fatal(err)
			}
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	if o.Settings == nil {
		o.Settings = map[string]string{}
	}
	o.Settings["ssl"] = "on"
	o.Settings["ssl_cert_file"] = "'" + certFile + "'"
	o.Settings["ssl_key_file"] = "'" + keyFile + "'"
	o.Settings["ssl_ca_file"] = "'" + caFile + "'"
	return Start(tb, o)
}
