package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"
)

// Certs is the server's TLS certificate and key, read from their files at
// start and again on Reload (SIGHUP), so that a renewed certificate is
// served without a restart. A pair that fails to load leaves the one in
// use.
type Certs struct {
	certFile, keyFile string
	cur               atomic.Pointer[certState]
}

type certState struct {
	cert  tls.Certificate
	names []string
}

// LoadCerts reads the certificate chain and key of PEM files certFile and
// keyFile.
func LoadCerts(certFile, keyFile string) (*Certs, error) {
	c := &Certs{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again; on an error the certificate in use stays.
func (c *Certs) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("TLS certificate %s: %w", c.certFile, err)
	}
	cert.Leaf = leaf
	c.cur.Store(&certState{cert: cert, names: leaf.DNSNames})
	return nil
}

// Names are the DNS names of the certificate in use: names the server
// answers for (withHostCheck).
func (c *Certs) Names() []string { return c.cur.Load().names }

// NotAfter is when the certificate in use expires, for the log.
func (c *Certs) NotAfter() string {
	return c.cur.Load().cert.Leaf.NotAfter.UTC().Format("2006-01-02")
}

// Config is the TLS configuration of the listener: TLS 1.2 or newer, the
// certificate in use at each handshake.
func (c *Certs) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &c.cur.Load().cert, nil
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
}
