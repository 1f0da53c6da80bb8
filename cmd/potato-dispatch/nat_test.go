package main

// Behind NAT for real: the server in one network namespace, the agent in
// another behind a third that masquerades it (scripts/test-netns). The
// server cannot open a connection to the agent's machine; the agent opens
// every connection itself.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// netns makes the three namespaces; outside CI a machine without root or
// nftables skips.
func netns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("pt%d", os.Getpid()%100000)
	out, err := exec.Command(filepath.Join(testcli.Root(), "scripts", "test-netns"), "up", name).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("scripts/test-netns up: %v\n%s", err, out)
		}
		t.Skipf("no network namespaces here (%v): %s", err, out)
	}
	t.Cleanup(func() { exec.Command(filepath.Join(testcli.Root(), "scripts", "test-netns"), "down", name).Run() })
	return name
}

func inNS(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// reach reports whether a TCP connection from namespace ns to addr opens.
func reach(ns, addr string) bool {
	host, port, _ := net.SplitHostPort(addr)
	return inNS(ns, "timeout", "3", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)).Run() == nil
}

func testBehindNAT(t *testing.T) {
	ns := netns(t)
	srvNS, labNS := ns+"-srv", ns+"-lab"
	runs := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: t.TempDir()}
	bin, root := runs.Bin, runs.Root()
	cfg := testproject.Write(t, runs.Dir, 120, 100, `  backend: lab
  backends:
    lab:
      type: agent
      heartbeat_timeout_s: 6
`)
	runs.Config = cfg
	token, err := root.IssueToken("lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const srvAddr = "10.200.1.1:8000"
	var srvLog bytes.Buffer
	srv := inNS(srvNS, filepath.Join(bin, "potato-server"), cfg, "--listen", srvAddr)
	srv.Stderr = &srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	testproject.WaitFor(t, "the server, from the agent's machine", func() bool { return reach(labNS, srvAddr) })

	// The server cannot open a connection to the agent's machine.
	lis := inNS(labNS, "python3", "-m", "http.server", "--bind", "10.200.2.2", "9001")
	if err := lis.Start(); err != nil {
		t.Fatal(err)
	}
	testproject.WaitFor(t, "a listener on the agent's machine", func() bool { return reach(labNS, "10.200.2.2:9001") })
	if reach(srvNS, "10.200.2.2:9001") {
		t.Fatal("the server's namespace reaches the agent's machine: not behind NAT")
	}
	lis.Process.Kill()
	lis.Wait()

	// The server is outside the agent's loopback, on the namespaces'
	// own network, in plain http: --insecure-http.
	agent := func(extra ...string) (*exec.Cmd, *bytes.Buffer) {
		work := t.TempDir()
		cmd := inNS(labNS, "env", append([]string{"POTATO_TRAINING_TOKEN=" + token, "POTATO_TRAINING_UNREACHABLE_S=4",
			filepath.Join(bin, "potato-agent"), "--server", "http://" + srvAddr, "--insecure-http", "--backend", "lab", "--workdir", work, "--once"}, extra...)...)
		var b bytes.Buffer
		cmd.Stderr = &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, &b
	}
	dispatch := func(args ...string) string {
		return runs.Detach(append([]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment"}, args...)...)
	}
	info, runLog := runs.Info, func(id string) string { return runs.File(id, "run.log") }

	// A run completes through the NAT.
	id := dispatch("--param", "epochs=3")
	a, alog := agent()
	testproject.WaitFor(t, "the first run", func() bool { return info(id).Finished })
	if i := info(id); i.State != rundir.StateSuccess {
		t.Fatalf("first run: %s %q\n%s\nagent:\n%s\nserver:\n%s", i.State, i.Error, runLog(id), alog, &srvLog)
	}
	a.Wait()

	// The link is cut during a run: the agent stops its training process
	// itself after the unreachable limit, and the server fails the run by
	// its heartbeat.
	// The second run's fit lasts until it is stopped: the link is cut
	// while it fits.
	fit := testproject.NewEndless(t, testcli.SharedDir(t, 0o755), filepath.Join(bin, "potato-agent"))
	id = runs.Detach(fit.Args()...)
	a, alog = agent("--allow-exec", fit.Program())
	testproject.WaitFor(t, "the second run to train", func() bool {
		return strings.Contains(runLog(id), "claimed the run") && info(id).Progress != nil
	})
	if out, err := exec.Command(filepath.Join(testcli.Root(), "scripts", "test-netns"), "cut", ns).CombinedOutput(); err != nil {
		t.Fatalf("cut: %v %s", err, out)
	}
	testproject.WaitFor(t, "the server to fail the run", func() bool { return info(id).Finished })
	want := "No word from the agent on lab for 6 seconds"
	if i := info(id); i.State != rundir.StateError || i.Error != want {
		t.Errorf("second run: %s %q, want %q\n%s", i.State, i.Error, want, runLog(id))
	}
	testproject.WaitFor(t, "the agent to say it stopped the run", func() bool {
		return strings.Contains(alog.String(), "the server could not be reached for 4 seconds")
	})
	if out, err := exec.Command(filepath.Join(testcli.Root(), "scripts", "test-netns"), "restore", ns).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v %s", err, out)
	}
	// The link is back: nothing is left running on the agent's machine.
	done := make(chan error, 1)
	go func() { done <- a.Wait() }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the agent is still running after the link came back\n%s", alog)
	}
	out, _ := exec.Command("ip", "netns", "pids", labNS).Output()
	if pids := strings.Fields(string(out)); len(pids) > 0 {
		ps, _ := exec.Command("ps", append([]string{"-o", "pid,args", "-p"}, strings.Join(pids, ","))...).Output()
		t.Errorf("processes left on the agent's machine:\n%s", ps)
	}
}
