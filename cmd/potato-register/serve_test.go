package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/lib/rundir"
)

// The tutorial's project: its admin_api_key, the placeholder with which
// potato serve listens on loopback alone, and its agent backend.
const tutorialConfig = `admin_api_key: "change-me"
annotation_schemes:
  - {annotation_type: radio, name: sentiment, labels: [positive, negative]}
model_training:
  enabled: true
  backends:
    lab-workstation:
      type: agent
      queue_timeout_s: 3600
`

var agentLine = regexp.MustCompile(`(?m)^  potato training agent --server (\S+)( --insecure-http)? --backend lab-workstation$`)

// TestAgentLineReachesServer starts the real potato serve of the
// tutorial's project, with its address (and, over https, its
// certificate) from the environment, and runs potato training register
// in that same environment without --server, as the tutorial does. The
// agent's line that register prints names this machine, with the scheme
// and port the server listens with; the warning about the tutorial's
// admin_api_key comes before it. Then the agent runs as the line says,
// with the token register printed: the server sees it (the backend's
// last_seen). Two changes to the line, which is for another machine: the
// host is 127.0.0.1, since the server listens on loopback (all a test
// may reach), and over https the agent gets --ca-file, for the test's
// private CA.
func TestAgentLineReachesServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts potato serve and an agent")
	}
	bin := testcli.Binaries(t)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, "config.yaml"), tutorialConfig)
			port := freePort(t)
			env := cleanEnv("POTATO_SERVER_LISTEN=127.0.0.1:" + port)
			var agentArgs []string
			if scheme == "https" {
				ca := tlsFiles(t, dir)
				env = append(env, "POTATO_SERVER_TLS_CERT="+filepath.Join(dir, "cert.pem"), "POTATO_SERVER_TLS_KEY="+filepath.Join(dir, "key.pem"))
				agentArgs = append(agentArgs, "--ca-file", ca)
			}

			serve := start(t, dir, env, filepath.Join(bin, "potato"), "serve", "config.yaml")
			waitFor(t, "potato serve to listen on 127.0.0.1:"+port, serve, func() bool {
				c, err := net.Dial("tcp", "127.0.0.1:"+port)
				if err == nil {
					c.Close()
				}
				return err == nil
			})

			reg := exec.Command(filepath.Join(bin, "potato"), "training", "register", "lab-workstation", "config.yaml")
			reg.Dir, reg.Env = dir, env
			var out bytes.Buffer
			reg.Stdout, reg.Stderr = &out, &out // one pipe: the lines in the order written
			if err := reg.Run(); err != nil {
				t.Fatalf("potato training register: %v\n%s", err, out.String())
			}
			text := out.String()
			m := agentLine.FindStringSubmatchIndex(text)
			if m == nil {
				t.Fatalf("no agent's line in:\n%s", text)
			}
			warn := strings.Index(text, `potato-register: warning: config.yaml: admin_api_key is "change-me", a well-known placeholder, with which potato serve listens on loopback alone`)
			hint := strings.Index(text, "potato-register: hint: set a long random admin_api_key in config.yaml (openssl rand -hex 32), then start potato serve config.yaml --listen 0.0.0.0:"+port+"\n")
			if warn < 0 || hint < 0 || warn > m[0] || hint > m[0] {
				t.Errorf("the weak admin_api_key is not said, with its fix, before the agent's line:\n%s", text)
			}
			u, err := url.Parse(text[m[2]:m[3]])
			if err != nil {
				t.Fatal(err)
			}
			if u.Scheme != scheme || u.Port() != port || u.Hostname() != hostname() {
				t.Errorf("the agent's line says --server %s, want %s://%s:%s", u, scheme, hostname(), port)
			}
			if insecure := m[4] >= 0; insecure != (scheme == "http") {
				t.Errorf("--insecure-http in the line: %v, for %s", insecure, scheme)
			}
			tok := tokenLine.FindStringSubmatch(text)
			if tok == nil {
				t.Fatalf("no token in:\n%s", text)
			}

			u.Host = net.JoinHostPort("127.0.0.1", u.Port())
			args := []string{"training", "agent", "--server", u.String()}
			if m[4] >= 0 {
				args = append(args, "--insecure-http")
			}
			args = append(args, "--backend", "lab-workstation", "--workdir", filepath.Join(dir, "agent"))
			agent := start(t, dir, append(env, "POTATO_TRAINING_TOKEN="+tok[1]), filepath.Join(bin, "potato"), append(args, agentArgs...)...)
			root := &rundir.Root{Dir: filepath.Join(dir, "annotation_output", "training")}
			waitFor(t, "the server to see the agent (last_seen)", agent, func() bool {
				rec, err := root.Agent("lab-workstation")
				return err == nil && rec.LastSeen != nil
			})
		})
	}
}

// cleanEnv is this process's environment without the toolkit's own
// variables, which would change what the commands do, and with add.
func cleanEnv(add ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POTATO_") {
			env = append(env, kv)
		}
	}
	return append(env, add...)
}

// proc is a command started in the background, its output kept.
type proc struct {
	name   string
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// start starts program with args in dir, and stops it (SIGTERM, then
// SIGKILL) when the test ends.
func start(t *testing.T, dir string, env []string, program string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(program) + " " + strings.Join(args, " "), exited: make(chan struct{})}
	cmd := exec.Command(program, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, p, p
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitFor polls cond until it holds; p exiting first, or a minute
// passing (a bound for a command that never gets there, not a speed
// target), fails the test with p's output.
func waitFor(t *testing.T, what string, p *proc, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before %s:\n%s", p.name, what, p.output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute; %s said:\n%s", what, p.name, p.output())
		}
	}
}

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsFiles writes into dir a private CA (ca.pem, whose path it returns)
// and a certificate it signs for 127.0.0.1 (cert.pem, key.pem).
func tlsFiles(t *testing.T, dir string) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "potato test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pemOf := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	write(t, filepath.Join(dir, "cert.pem"), pemOf("CERTIFICATE", der))
	write(t, filepath.Join(dir, "key.pem"), pemOf("EC PRIVATE KEY", keyDER))
	caFile := filepath.Join(dir, "ca.pem")
	write(t, caFile, pemOf("CERTIFICATE", caDER))
	return caFile
}
