package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/lib/agentproto"
)

// apiGet sends, from address from, GET of the API's runs with key and
// extra header lines, on a connection of its own, and returns the status.
func (p *liveServer) apiGet(t *testing.T, from, key string, headers ...string) int {
	t.Helper()
	c, err := dialFrom(t, from, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	h := "X-API-Key: " + key + "\r\nConnection: close\r\n"
	for _, x := range headers {
		h += x + "\r\n"
	}
	c.send(fmt.Sprintf("GET %s/runs HTTP/1.1\r\nHost: %s\r\n%s\r\n", apiPrefix, p.addr, h))
	resp, _, err := c.answer()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestForwardedForNotBelieved: with no trusted_proxies, a client on this
// machine that writes a new X-Forwarded-For with each wrong key is still
// counted as itself: its sixth try, the right key, is refused (429). The
// address it named is not locked out by it, and another address is not
// either.
func TestForwardedForNotBelieved(t *testing.T) {
	testcli.Short(t, "it waits out the sign-in limit's lockouts (about 8 s)")
	p := newLiveServerWith(t, nil, "", nil)
	for i := 0; i < maxFailures; i++ {
		// The last failure starts the lockout, and is answered 429.
		if code := p.apiGet(t, "127.0.0.1", "wrong-key", fmt.Sprintf("X-Forwarded-For: 203.0.113.%d", i+1)); code != http.StatusUnauthorized && (i < maxFailures-1 || code != http.StatusTooManyRequests) {
			t.Fatalf("wrong key %d: %d", i+1, code)
		}
	}
	if code := p.apiGet(t, "127.0.0.1", testKey, "X-Forwarded-For: 203.0.113.99"); code != http.StatusTooManyRequests {
		t.Errorf("the right key after %d failures under new forwarded addresses: %d, want 429", maxFailures, code)
	}
	if p.log.count("wrong API key from 127.0.0.1 ") != maxFailures {
		t.Errorf("the failures were not counted against 127.0.0.1")
	}
	if code := p.apiGet(t, "127.0.0.2", testKey, "X-Forwarded-For: 127.0.0.1"); code != http.StatusOK {
		t.Errorf("another address, naming the locked one: %d, want 200", code)
	}
}

// TestForwardedForFromTrustedProxy: behind a trusted proxy (127.0.0.1),
// the client is the address the proxy appended; what the client wrote
// before it is not believed. A client that forges a new first hop with
// each wrong key is locked out as itself, another client behind the same
// proxy is not, and a peer that is not a trusted proxy is counted as
// itself whatever it writes.
func TestForwardedForFromTrustedProxy(t *testing.T) {
	testcli.Short(t, "it waits out the sign-in limit's lockouts (about 15 s)")
	p := newLiveServerWith(t, nil, "  trusted_proxies: [127.0.0.1, \"10.9.0.0/16\"]\n", nil)
	for i := 0; i < maxFailures; i++ {
		xff := fmt.Sprintf("X-Forwarded-For: 203.0.113.%d, 198.51.100.7, 10.9.0.3", i+1)
		if code := p.apiGet(t, "127.0.0.1", "wrong-key", xff); code != http.StatusUnauthorized && (i < maxFailures-1 || code != http.StatusTooManyRequests) {
			t.Fatalf("wrong key %d: %d", i+1, code)
		}
	}
	if code := p.apiGet(t, "127.0.0.1", testKey, "X-Forwarded-For: 203.0.113.50, 198.51.100.7"); code != http.StatusTooManyRequests {
		t.Errorf("the locked client's right key: %d, want 429", code)
	}
	if p.log.count("wrong API key from 198.51.100.7 ") != maxFailures {
		t.Errorf("the failures were not counted against 198.51.100.7, the address the proxy saw")
	}
	if code := p.apiGet(t, "127.0.0.1", testKey, "X-Forwarded-For: 198.51.100.8"); code != http.StatusOK {
		t.Errorf("another client behind the proxy: %d, want 200", code)
	}
	for i := 0; i < maxFailures; i++ {
		p.apiGet(t, "127.0.0.2", "wrong-key", fmt.Sprintf("X-Forwarded-For: 198.51.100.%d", 100+i))
	}
	if code := p.apiGet(t, "127.0.0.2", testKey, "X-Forwarded-For: 198.51.100.200"); code != http.StatusTooManyRequests {
		t.Errorf("a peer that is no trusted proxy: %d after its failures, want 429", code)
	}
}

// TestDNSRebinding: a page of another site whose name resolves to this
// server sends its own name as Host: the page and the API refuse it (421)
// even with the right key, while an IP address, localhost and a name of
// allowed_hosts are served; the agents' routes, which carry their token,
// are not judged by Host.
func TestDNSRebinding(t *testing.T) {
	p := newLiveServerWith(t, nil, "  allowed_hosts: [annotate.example.org]\n", nil)
	_, port, _ := net.SplitHostPort(p.addr)
	get := func(host, path string, headers ...string) (int, string) {
		c, err := dialFrom(t, "", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		h := ""
		for _, x := range headers {
			h += x + "\r\n"
		}
		c.send(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", path, host, h))
		resp, body, err := c.answer()
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "127.0.0.1.attacker.example:" + port} {
		if code, body := get(host, apiPrefix+"/runs", "X-API-Key: "+testKey); code != http.StatusMisdirectedRequest || !strings.Contains(body, "is not a name this server answers for") {
			t.Errorf("API with Host %s: %d %s", host, code, body)
		}
		if code, _ := get(host, pagePath); code != http.StatusMisdirectedRequest {
			t.Errorf("page with Host %s: %d", host, code)
		}
	}
	for _, host := range []string{p.addr, "localhost:" + port, "[::1]:" + port, "annotate.example.org:" + port, "ANNOTATE.example.org."} {
		if code, _ := get(host, apiPrefix+"/runs", "X-API-Key: "+testKey); code != http.StatusOK {
			t.Errorf("API with Host %s: %d, want 200", host, code)
		}
	}
	if code, _ := get("rebind.attacker.example", agentproto.PathPrefix+"/claim", "Authorization: Bearer "+p.tok); code == http.StatusMisdirectedRequest {
		t.Errorf("an agent's route was judged by its Host")
	}
}

// testPKI is a private CA and the files of certificates it signs for
// 127.0.0.1 and potato.test.
type testPKI struct {
	dir    string
	caKey  *ecdsa.PrivateKey
	ca     *x509.Certificate
	caFile string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "potato test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pk := &testPKI{dir: t.TempDir(), caKey: key, ca: ca}
	pk.caFile = filepath.Join(pk.dir, "ca.pem")
	os.WriteFile(pk.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	return pk
}

// issue writes server.pem and server.key of a certificate of serial.
func (pk *testPKI) issue(t *testing.T, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "potato.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"potato.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pk.ca, &key.PublicKey, pk.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(pk.dir, "server.pem"), filepath.Join(pk.dir, "server.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

// TestTLS: potato-server serves HTTPS with its certificate. The session
// cookie is Secure with the __Host- prefix, every answer carries HSTS, and
// plain http to the port gets no page. A polling agent reaches it with
// --ca-file's CA. A renewed certificate is served after Reload (SIGHUP),
// and a broken one leaves the one in use. The certificate's name is a name
// the server answers for.
func TestTLS(t *testing.T) {
	t.Parallel()
	pk := newTestPKI(t)
	certFile, keyFile := pk.issue(t, 100)
	certs, err := LoadCerts(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	p := newLiveServerWith(t, nil, "", certs)
	pool := x509.NewCertPool()
	pool.AddCert(pk.ca)
	served := func() int64 {
		c, err := tls.Dial("tcp", p.addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "https://" + p.addr
	resp, err := hc.PostForm(base+pagePath+"/login", url.Values{"key": {testKey}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("sign-in: %d %v", resp.StatusCode, cookies)
	}
	if c := cookies[0]; c.Name != "__Host-potato_training_session" || !c.Secure || c.Path != "/" || !c.HttpOnly || c.Domain != "" {
		t.Errorf("session cookie over https: %+v", c)
	}
	if h := resp.Header.Get("Strict-Transport-Security"); !strings.HasPrefix(h, "max-age=") {
		t.Errorf("Strict-Transport-Security: %q", h)
	}
	req, _ := http.NewRequest("GET", base+apiPrefix+"/runs", nil)
	req.AddCookie(cookies[0])
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the API with the __Host- cookie: %v %v", resp, err)
	}
	req, _ = http.NewRequest("GET", "https://potato.test:1"+apiPrefix+"/runs", nil)
	req.Header.Set("X-API-Key", testKey)
	if code, _ := p.rawTLS(t, pool, "potato.test", req); code != http.StatusOK {
		t.Errorf("Host potato.test, the certificate's name: %d", code)
	}
	if r, err := http.Get("http://" + p.addr + pagePath); err == nil && r.StatusCode == http.StatusOK {
		t.Errorf("plain http to the https port served the page")
	}

	ac, err := agentproto.NewClient(base, p.tok, agentproto.ClientOptions{CAFile: pk.caFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Claim(context.Background(), agentproto.ClaimRequest{Backend: "lab", Host: "h", Workdir: "/w", Version: "v"}); err != nil {
		t.Errorf("an agent's claim over https with --ca-file: %v", err)
	}

	if served() != 100 {
		t.Fatal("not the first certificate")
	}
	pk.issue(t, 200)
	if err := certs.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := served(); n != 200 {
		t.Errorf("after Reload the server sends certificate %d, want 200", n)
	}
	os.WriteFile(certFile, []byte("not a certificate\n"), 0o644)
	if err := certs.Reload(); err == nil {
		t.Error("a broken certificate loaded")
	}
	if n := served(); n != 200 {
		t.Errorf("after a failed Reload the server sends certificate %d, want 200", n)
	}
}

// rawTLS sends req over TLS to p.addr with Host host, and returns its
// status.
func (p *liveServer) rawTLS(t *testing.T, pool *x509.CertPool, host string, req *http.Request) (int, error) {
	t.Helper()
	c, err := tls.Dial("tcp", p.addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req.Host = host
	req.Close = true
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
