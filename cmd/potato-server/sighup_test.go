package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
)

// TestHangUpKeepsServing: the built potato-server, sent SIGHUP, goes on
// serving: without --tls-cert the log notes there is nothing to read
// again; with it, the renewed certificate is served from then on; with
// the reader of its standard error gone, the log line fails and the
// server goes on. It stops on SIGTERM, exit 0. Before, a server without
// --tls-cert died of the signal, and one whose log could not be written
// of SIGPIPE.
func TestHangUpKeepsServing(t *testing.T) {
	dir := t.TempDir()
	// A copy of the built potato-server, alone in dir.
	bin := testcli.CopyBinary(t, "potato-server", dir)
	// The server looks for these beside itself; no run starts here.
	for _, name := range []string{"potato-dispatch", "potato-check"} {
		testcli.WriteExecutable(t, filepath.Join(dir, name), []byte("#!/bin/sh\nexit 1\n"))
	}
	cfg := testproject.Write(t, t.TempDir(), 4, 2, "")
	testproject.SetAPIKey(t, cfg, "a-test-key-0123456789abcdef")

	t.Run("http", func(t *testing.T) {
		srv := startServer(t, bin, cfg)
		get := func() {
			t.Helper()
			resp, err := http.Get("http://" + srv.addr + "/admin/training/login")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("the sign-in page: %v %v\n%s", resp, err, srv.log.String())
			}
			resp.Body.Close()
		}
		get()
		for i := 1; i <= 2; i++ {
			srv.hangUp(i, "SIGHUP: nothing to read again (no --tls-cert); serving on")
			get()
		}
		srv.stop()
	})

	// The log's reader gone (a pipe into a program that went with the
	// terminal): the next log line fails, and the server goes on.
	t.Run("log reader gone", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		srv := &runningServer{t: t, log: &testcli.SyncBuffer{}, done: make(chan error, 1)}
		srv.cmd = exec.Command(bin, cfg, "--listen", "127.0.0.1:0")
		srv.cmd.Stderr = w
		if err := srv.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		go func() { srv.done <- srv.cmd.Wait() }()
		t.Cleanup(func() {
			if srv.cmd.ProcessState == nil {
				_ = srv.cmd.Process.Kill()
				<-srv.done
			}
		})
		line, err := bufio.NewReader(r).ReadString('\n')
		m := regexp.MustCompile(`on http://(127\.0\.0\.1:[0-9]+)`).FindStringSubmatch(line)
		if err != nil || m == nil {
			t.Fatalf("the server's first line: %q %v", line, err)
		}
		srv.addr = m[1]
		r.Close()
		// Each SIGHUP writes a line to the closed pipe.
		for i := 0; i < 3; i++ {
			if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get("http://" + srv.addr + "/admin/training/login")
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("the sign-in page after SIGHUP %d, its log line written to a closed pipe: %v %v", i+1, resp, err)
			}
			resp.Body.Close()
		}
		srv.stop()
	})

	t.Run("https", func(t *testing.T) {
		certFile, keyFile := filepath.Join(t.TempDir(), "cert.pem"), filepath.Join(t.TempDir(), "key.pem")
		pool := x509.NewCertPool()
		pool.AddCert(selfSigned(t, 1, certFile, keyFile))
		srv := startServer(t, bin, cfg, "--tls-cert", certFile, "--tls-key", keyFile)
		serial := func() int64 {
			t.Helper()
			c, err := tls.Dial("tcp", srv.addr, &tls.Config{RootCAs: pool})
			if err != nil {
				t.Fatalf("%v\n%s", err, srv.log.String())
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		}
		if got := serial(); got != 1 {
			t.Fatalf("certificate %d served, want 1", got)
		}
		pool.AddCert(selfSigned(t, 2, certFile, keyFile))
		srv.hangUp(1, "SIGHUP: TLS certificate read again")
		if got := serial(); got != 2 {
			t.Errorf("certificate %d served after SIGHUP, want the renewed 2", got)
		}
		srv.stop()
	})
}

type runningServer struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  *testcli.SyncBuffer
	addr string
	done chan error
}

// startServer starts bin on a free port of 127.0.0.1 and waits for it to
// say where it serves.
func startServer(t *testing.T, bin, cfg string, args ...string) *runningServer {
	t.Helper()
	s := &runningServer{t: t, log: &testcli.SyncBuffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(bin, append([]string{cfg, "--listen", "127.0.0.1:0"}, args...)...)
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	serving := regexp.MustCompile(`serving .* on https?://(127\.0\.0\.1:[0-9]+)`)
	s.wait("serving", func() bool {
		m := serving.FindStringSubmatch(s.log.String())
		if m != nil {
			s.addr = m[1]
		}
		return m != nil
	})
	return s
}

// wait waits at most 30 s for ok, failing when the server exits first.
func (s *runningServer) wait(what string, ok func() bool) {
	s.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-s.done:
			s.done <- err
			s.t.Fatalf("the server exited (%v) before %s:\n%s", err, what, s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no %s after 30 s:\n%s", what, s.log.String())
		}
	}
}

// hangUp sends the n-th SIGHUP and waits for its n-th line in the log.
func (s *runningServer) hangUp(n int, line string) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		s.t.Fatal(err)
	}
	s.wait("the log line of SIGHUP", func() bool { return strings.Count(s.log.String(), line) >= n })
}

// stop sends SIGTERM and expects exit 0.
func (s *runningServer) stop() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Errorf("on SIGTERM: %v\n%s", err, s.log.String())
		}
	case <-time.After(30 * time.Second):
		s.t.Errorf("still running 30 s after SIGTERM")
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 with serial
// and its key as PEM files, and returns it.
func selfSigned(t *testing.T, serial int64, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "potato-server test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
