//go:build faults

package faults

// Faults of the remote backends: the ssh backend against the test sshd on
// loopback (scripts/test-sshd), the agent backend with a real
// potato-server and potato-agent, and, for the agent behind NAT and the
// cut link, the network namespaces of scripts/test-netns, whose addresses
// exist only inside them.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// remotePredicting predicts "positive" for every test and unlabeled item
// of the bundle, so that its run writes prelabels; big MB of random bytes
// follow as the model, so that the copy back takes seconds.
func remotePredicting(bigMB int) string {
	return `mkdir -p artifacts
cat bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
echo '{"v":1,"event":"status","state":"fitting","step":"writing the model"}'
head -c ` + strconv.Itoa(bigMB<<20) + ` /dev/urandom > artifacts/model.bin
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`
}

// remoteSSHProject is a project whose default backend "gpu" is the ssh
// host alias host of sshConfig, with a remote_dir of its own that the
// test removes; env goes to the dispatch.
func remoteSSHProject(t *testing.T, host, sshConfig string, env ...string) (p *project, remoteDir string) {
	t.Helper()
	remoteDir = testcli.SharedDir(t, 0o777)
	p = newProject(t, "", 120, 100, testcli.SSHBackend(host, sshConfig, remoteDir, 10, ""))
	p.Env = env
	return p, remoteDir
}

// remoteTree is pid and its descendants, each with its command line.
func remoteTree(pid int) map[int]string {
	children := map[int][]int{}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		children[ppid] = append(children[ppid], child)
	}
	tree := map[int]string{}
	for todo := []int{pid}; len(todo) > 0; todo = todo[1:] {
		tree[todo[0]] = remoteCmdline(todo[0])
		todo = append(todo, children[todo[0]]...)
	}
	return tree
}

func remoteCmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// remoteLeftAfter is remoteLeft once it is empty, or once bound has
// passed.
func remoteLeftAfter(tree map[int]string, id string, bound time.Duration) []string {
	deadline := time.Now().Add(bound)
	left := remoteLeft(tree, id)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		left = remoteLeft(tree, id)
	}
	return left
}

// remoteLeft are the processes of tree still running (the same pid with
// the same command line), and the remote user's processes whose command
// line names the run.
func remoteLeft(tree map[int]string, id string) []string {
	var left []string
	for pid, cmd := range tree {
		if cmd != "" && remoteCmdline(pid) == cmd {
			left = append(left, fmt.Sprintf("%d %s", pid, cmd))
		}
	}
	out, _ := exec.Command("pgrep", "-a", "-u", "potatotest", "-f", id).Output()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			left = append(left, l)
		}
	}
	return left
}

// remoteLines counts the lines of a file; -1 when it is not there.
func remoteLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	return bytes.Count(b, []byte("\n"))
}

// remoteWriteback runs potato-dispatch writeback and says what it did.
func (p *project) remoteWriteback(id string) string {
	p.t.Helper()
	var out, errb bytes.Buffer
	cmd := p.Command("potato-dispatch", "writeback", p.Config, id)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	s := strings.TrimSpace(out.String() + errb.String())
	if err != nil {
		return fmt.Sprintf("%v: %s", err, s)
	}
	return s
}

// remoteUntilCopyBack starts a run whose trainer predicts, then writes a
// 600 MB model, and waits until its copy back has moved bytes: the window
// of the copy-back faults.
func (p *project) remoteUntilCopyBack() (string, rundir.Info) {
	p.t.Helper()
	tr := testproject.Trainer(p.t, testcli.SharedDir(p.t, 0o755), remotePredicting(600))
	id := p.Detach("--trainer", tr, "--schemas", "sentiment")
	var at rundir.Info
	testproject.WaitFor(p.t, "the copy back", func() bool {
		at = p.Info(id)
		return at.Finished || at.Progress != nil && at.Progress.Phase == "fetch" && at.Progress.Current > 0
	})
	if at.Finished {
		p.t.Fatalf("the run ended before the copy back was seen: %s\n%s", at.State, p.File(id, rundir.LogFile))
	}
	return id, at
}

// natCut drops every packet between ns's lab and srv; the returned
// restore ends the cut, once, and the test's end does if nobody did.
func natCut(t *testing.T, ns string) (restore func()) {
	t.Helper()
	natScript(t, "cut", ns)
	var once sync.Once
	restore = func() { once.Do(func() { natScript(t, "restore", ns) }) }
	t.Cleanup(restore)
	return restore
}

// natSSHProject is a project whose ssh host is an sshd in namespace ns's
// srv, reached from a dispatch in its lab, with a stall timeout of 3 s.
func natSSHProject(t *testing.T, ns string) (*project, string) {
	t.Helper()
	p, remoteDir := remoteSSHProject(t, "potato-nat", natSSHD(t, ns), "POTATO_TRAINING_STALL_TIMEOUT_S=3")
	p.Bin = natBin(t, p.Bin, ns+"-lab")
	return p, remoteDir
}

// The fault: kill -9 of a detached ssh dispatch while it copies the model
// (a 600 MB artifact) back, with run.json's progress in phase "fetch".
// Expected: error/dispatch_lost in run.json, the store and the page; the
// predictions, which the agent uploaded before its result, are whole in
// the run's predictions.jsonl; the ssh master and its sessions die with
// the dispatch and no process of the run is left on the host; the job
// directory, with the model, stays on the host (nobody is left to remove
// it); potato-dispatch writeback then writes every prediction into the
// store; the next run succeeds.
func testRemoteKillDispatchDuringCopyBack(t *testing.T) {
	sd := testcli.SSHD(t)
	p, remoteDir := remoteSSHProject(t, "potato-test", sd+"/ssh_config")
	id, at := p.remoteUntilCopyBack()
	tree := remoteTree(at.PID)
	p.killDispatch(id)
	f := p.settled(id, rundir.StateError, "dispatch_lost", 30*time.Second)

	job := filepath.Join(remoteDir, "jobs", id)
	produced := remoteLines(filepath.Join(job, "artifacts", "predictions.jsonl"))
	stored, kept := p.predictions(id)
	if produced <= 0 || kept != produced {
		t.Errorf("predictions: %d produced on the host, %d in the run's predictions.jsonl", produced, kept)
	}
	left := remoteLeftAfter(tree, id, 30*time.Second)
	if len(left) > 0 {
		t.Errorf("processes of the run left 30 s after the kill:\n%s", strings.Join(left, "\n"))
	}
	model := "gone from the host"
	if st, err := os.Stat(filepath.Join(job, "artifacts", "model.bin")); err == nil {
		model = fmt.Sprintf("stays on the host (%d MB in jobs/%s)", st.Size()>>20, id)
	}
	socks, _ := filepath.Glob("/tmp/potato-" + id + "-*.sock")
	for _, s := range socks {
		os.Remove(s)
	}
	wb := p.remoteWriteback(id)
	storedAfter, _ := p.predictions(id)
	if storedAfter != kept || !strings.Contains(wb, "now success") {
		t.Errorf("writeback stored %d of %d predictions: %s", storedAfter, kept, wb)
	}
	record(t, "kill -9 of the ssh dispatch during the copy back",
		"error/dispatch_lost everywhere; predictions whole in predictions.jsonl, all stored by writeback; no process of the run left; next run succeeds",
		fmt.Sprintf("%s; killed at %d of %d MB; %d predictions produced, %d kept, %d stored; writeback: %d stored after (%q); model %s; %d forwarded socket(s) left in /tmp; %d processes left; %s",
			f, int64(at.Progress.Current)>>20, int64(at.Progress.Total)>>20, produced, kept, stored, storedAfter, wb, model, len(socks), len(left), p.nextRunSucceeds()))
}

// The fault: kill -9 of the remote potato-agent of an ssh run while its
// trainer fits. Expected: the run fails with the session's text
// ("the ssh session to potato-test ended before the agent reported a
// result ...") or the heartbeat's ("No word from the agent on gpu for 10
// seconds"), in all three witnesses; the training process dies with its
// agent (its parent-death signal); the next run succeeds.
func testRemoteKillSSHAgentMidFit(t *testing.T) {
	sd := testcli.SSHD(t)
	p, remoteDir := remoteSSHProject(t, "potato-test", sd+"/ssh_config")
	id := p.Detach(p.endless(remoteDir + "/code/*/potato-agent").Args()...)
	p.fitting(t, id)
	agents := remotePgrep(t, "potato-agent --socket /tmp/potato-"+id)
	trainer := p.trainer(id)
	if len(agents) == 0 {
		t.Fatalf("no remote agent of the run\n%s", p.File(id, rundir.LogFile))
	}
	for _, pid := range agents {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	killed := time.Now()
	info := p.Wait(id, 90*time.Second)
	took := time.Since(killed)
	session := "the ssh session to potato-test ended before the agent reported a result"
	heartbeat := "No word from the agent on gpu for 10 seconds"
	if !strings.HasPrefix(info.Error, session) && info.Error != heartbeat {
		t.Errorf("error %q, want the session's or the heartbeat's text\n%s", info.Error, p.File(id, rundir.LogFile))
	}
	f := p.settled(id, rundir.StateError, info.ErrorCode, 10*time.Second)
	testproject.WaitFor(t, "the remote trainer to go with its agent", trainer.gone)
	job := "removed from the host"
	if _, err := os.Stat(filepath.Join(remoteDir, "jobs", id)); err == nil {
		job = "left on the host"
	}
	record(t, "kill -9 of the remote agent (ssh) mid-fit",
		"error with the session's or heartbeat's text everywhere; remote trainer stopped; next run succeeds",
		fmt.Sprintf("%s after %.1f s: %q; remote trainer stopped; job directory %s; %s", f, took.Seconds(), info.Error, job, p.nextRunSucceeds()))
}

// remotePgrep are the pids of the remote user's processes matching
// pattern.
func remotePgrep(t *testing.T, pattern string) []int {
	t.Helper()
	out, _ := exec.Command("pgrep", "-u", "potatotest", "-f", pattern).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// remoteProc is a program the test started, with its standard error.
type remoteProc struct {
	cmd *exec.Cmd
	log *testcli.SyncBuffer
}

// remoteStart starts name (in network namespace ns unless ns is "") and
// kills it when the test ends.
func remoteStart(t *testing.T, ns string, env []string, name string, args ...string) *remoteProc {
	t.Helper()
	if ns != "" {
		args = append([]string{"netns", "exec", ns, name}, args...)
		name = "ip"
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	pr := &remoteProc{cmd: cmd, log: &testcli.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = pr.log, pr.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.kill() })
	return pr
}

// kill ends the process with SIGKILL and waits for it; again, it does
// nothing.
func (pr *remoteProc) kill() {
	if pr.cmd.ProcessState == nil {
		pr.cmd.Process.Kill()
		pr.cmd.Wait()
	}
}

// remoteAgentProject is a project whose default backend "lab" is of type
// agent, with the backend's token.
func remoteAgentProject(t *testing.T, heartbeatS int) (*project, string) {
	t.Helper()
	p := newProject(t, "", 120, 100, fmt.Sprintf(`  backend: lab
  backends:
    lab:
      type: agent
      heartbeat_timeout_s: %d
`, heartbeatS))
	token, err := p.Root().IssueToken("lab", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p, token
}

// remoteAgent starts a polling potato-agent of backend lab (in ns unless
// ns is ""). In a namespace the server is outside loopback, on the
// test's own network, in plain http: --insecure-http.
func (p *project) remoteAgent(ns, token, server, workdir string, args ...string) *remoteProc {
	p.t.Helper()
	if ns != "" {
		args = append([]string{"--insecure-http"}, args...)
	}
	return remoteStart(p.t, ns, []string{"POTATO_TRAINING_TOKEN=" + token}, filepath.Join(p.Bin, "potato-agent"),
		append([]string{"--server", server, "--backend", "lab", "--workdir", workdir}, args...)...)
}

// remoteServer starts potato-server on addr (in ns unless ns is "") and
// waits until a connection from reachFrom ("" = here) opens.
func (p *project) remoteServer(ns, addr, reachFrom string) *remoteProc {
	p.t.Helper()
	s := remoteStart(p.t, ns, nil, filepath.Join(p.Bin, "potato-server"), p.Config, "--listen", addr)
	testproject.WaitFor(p.t, "potato-server on "+addr, func() bool { return remoteReach(reachFrom, addr) })
	return s
}

// remoteReach reports whether a TCP connection from namespace ns ("" =
// here) to addr opens.
func remoteReach(ns, addr string) bool {
	if ns == "" {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	host, port, _ := net.SplitHostPort(addr)
	return exec.Command("ip", "netns", "exec", ns, "timeout", "3", "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)).Run() == nil
}

// natNetns makes scripts/test-netns's three namespaces under a name of
// this test process and removes them, with whatever runs in them, when
// the test ends.
func natNetns(t *testing.T, tag string) string {
	t.Helper()
	name := fmt.Sprintf("f%s%d", tag, os.Getpid()%100000)
	script := filepath.Join(testcli.Root(), "scripts", "test-netns")
	if out, err := exec.Command(script, "up", name).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("scripts/test-netns up: %v\n%s", err, out)
		}
		t.Skipf("no network namespaces here (%v): %s", err, out)
	}
	t.Cleanup(func() { exec.Command(script, "down", name).Run() })
	return name
}

// natScript runs scripts/test-netns VERB NAME.
func natScript(t *testing.T, verb, name string) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(testcli.Root(), "scripts", "test-netns"), verb, name).CombinedOutput(); err != nil {
		t.Fatalf("scripts/test-netns %s: %v\n%s", verb, err, out)
	}
}

// The fault: kill -9 of a polling potato-agent behind NAT (the agent in
// the lab namespace, potato-server in srv, rtr masquerading lab) while its
// trainer fits (a program its --allow-exec names). Expected: "No word from the agent on lab for 4
// seconds" in all three witnesses; the training process dies with its
// agent; an agent started again on the same work directory does not take
// the dead job up again (it spooled nothing: it died before the result)
// and claims the next run, which succeeds.
func testRemoteKillNATAgentMidFit(t *testing.T) {
	ns := natNetns(t, "a")
	p, token := remoteAgentProject(t, 4)
	const addr = "10.200.1.1:8000"
	p.remoteServer(ns+"-srv", addr, ns+"-lab")
	work := t.TempDir()
	fit := p.localEndless()
	a := p.remoteAgent(ns+"-lab", token, "http://"+addr, work, "--once", "--allow-exec", fit.Program())
	id := p.Detach(fit.Args()...)
	p.fitting(t, id)
	trainer := p.trainer(id)
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", a.cmd.Process.Pid)); strings.TrimSpace(string(comm)) != "potato-agent" {
		t.Fatalf("agent %d is %q\n%s", a.cmd.Process.Pid, comm, a.log)
	}
	a.kill()
	killed := time.Now()
	info := p.Wait(id, 60*time.Second)
	took := time.Since(killed)
	want := "No word from the agent on lab for 4 seconds"
	if info.Error != want {
		t.Errorf("error %q, want %q\n%s", info.Error, want, p.File(id, rundir.LogFile))
	}
	f := p.settled(id, rundir.StateError, info.ErrorCode, 10*time.Second)
	testproject.WaitFor(t, "the trainer to go with its agent", trainer.gone)
	stored, kept := p.predictions(id)

	again := p.remoteAgent(ns+"-lab", token, "http://"+addr, work, "--once")
	next := p.nextRunSucceeds()
	if err := remoteWaitExit(again, 30*time.Second); err != nil {
		t.Errorf("the second agent: %v\n%s", err, again.log)
	}
	resumed := "not taken up again"
	if strings.Contains(again.log.String(), id) {
		resumed = "taken up again"
		t.Errorf("the second agent took the dead run up again:\n%s", again.log)
	}
	if i := p.Info(id); i.State != rundir.StateError || i.Error != want {
		t.Errorf("the dead run changed: %s %q", i.State, i.Error)
	}
	left := "its job directory stays in the agent's workdir"
	if _, err := os.Stat(filepath.Join(work, "jobs", id)); err != nil {
		left = "its job directory is gone"
	}
	record(t, "kill -9 of the polling agent behind NAT mid-fit",
		"\""+want+"\" everywhere; trainer stopped; a new agent claims the next run, which succeeds",
		fmt.Sprintf("%s after %.1f s: %q; trainer stopped; %d predictions (none produced); dead run %s by the new agent, %s; %s",
			f, took.Seconds(), info.Error, stored+kept, resumed, left, next))
}

// remoteWaitExit waits for a process to exit by itself.
func remoteWaitExit(pr *remoteProc, bound time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- pr.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		pr.cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %s", bound)
	}
}

// The fault: potato-server killed (SIGKILL) while the agent trains, and
// started again on the same address once the agent has found it gone. Expected: the run goes on
// and succeeds (the agent keeps trying; the dispatch never depended on
// the server), every prediction is in Potato's store, and the three
// witnesses agree.
func testRemoteServerRestartMidRun(t *testing.T) {
	p, token := remoteAgentProject(t, 30)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := p.remoteServer("", addr, "")
	fit := p.localEndless()
	a := p.remoteAgent("", token, "http://"+addr, t.TempDir(), "--once", "--allow-exec", fit.Program())
	id := p.Detach(fit.Args()...)
	at := p.fitting(t, id)
	srv.kill()
	// The server is started again once the agent has met the outage, and
	// the fit ends once the agent has reached it again.
	testproject.WaitFor(t, "the agent to meet the outage", func() bool {
		return strings.Contains(a.log.String(), "trying again until the server answers")
	})
	p.remoteServer("", addr, "")
	testproject.WaitFor(t, "the agent to reach the server again", func() bool {
		return strings.Contains(a.log.String(), "the server answers again, after ")
	})
	fit.Release(t)
	f := p.settled(id, rundir.StateSuccess, "", 120*time.Second)
	info := p.Info(id)
	stored, kept := p.predictions(id)
	if kept == 0 || info.Writeback["n_read"] != kept || info.Writeback["n_written"] != stored || stored == 0 {
		t.Errorf("predictions: %d in predictions.jsonl, %d stored; writeback %v", kept, stored, info.Writeback)
	}
	if err := remoteWaitExit(a, 30*time.Second); err != nil {
		t.Errorf("the agent: %v\n%s", err, a.log)
	}
	// The agent met the outage mid-job and said when it ended.
	outage := ""
	for _, l := range strings.Split(a.log.String(), "\n") {
		if _, after, ok := strings.Cut(l, "the server answers again, after "); ok {
			outage = after
		}
	}
	if !strings.Contains(a.log.String(), "trying again until the server answers") || outage == "" {
		t.Errorf("the agent's log does not show the outage:\n%s", a.log)
	}
	// The agent ran its one job; another takes the next run.
	p.remoteAgent("", token, "http://"+addr, t.TempDir(), "--once")
	record(t, "potato-server killed and restarted mid-fit (agent)",
		"the run goes on and succeeds; every prediction stored; agreement",
		fmt.Sprintf("%s; killed at epoch %.0f of %.0f; the agent reached the server again after %s; %d predictions kept, %d written, %d stored; %s",
			f, at.Progress.Current, at.Progress.Total, outage, kept, info.Writeback["n_written"], stored, p.nextRunSucceeds()))
}

// natSSHD runs a second sshd, on the test sshd's config and host key,
// inside NAME-srv on 10.200.1.1:2222, and returns an ssh_config whose
// host potato-nat logs in there as the test user.
func natSSHD(t *testing.T, ns string) string {
	t.Helper()
	sd := testcli.SSHD(t)
	dir := t.TempDir()
	conf, err := os.ReadFile(filepath.Join(sd, "sshd_config"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(conf), "\n") {
		switch {
		case strings.HasPrefix(l, "ListenAddress "):
			l = "ListenAddress 10.200.1.1"
		case strings.HasPrefix(l, "PidFile "):
			l = "PidFile " + filepath.Join(dir, "sshd.pid")
		case strings.HasPrefix(l, "Port "):
			l = "Port 2222"
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(sd, "host_ed25519_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.Join(strings.Fields(string(pub))[:2], " ")
	os.WriteFile(filepath.Join(dir, "known_hosts"), []byte("[10.200.1.1]:2222 "+key+"\n"), 0o644)
	cfg := filepath.Join(dir, "ssh_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`Host potato-nat
	HostName 10.200.1.1
	Port 2222
	User potatotest
	IdentityFile %s/id_ed25519
	IdentitiesOnly yes
	UserKnownHostsFile %s/known_hosts
	StrictHostKeyChecking yes
	BatchMode yes
`, sd, dir)), 0o644)
	d := remoteStart(t, ns+"-srv", nil, "/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	testproject.WaitFor(t, "the sshd behind NAT", func() bool {
		if d.cmd.ProcessState != nil {
			t.Fatalf("sshd: %s", d.log)
		}
		return exec.Command("ip", "netns", "exec", ns+"-lab", "ssh", "-F", cfg, "-o", "ConnectTimeout=2", "potato-nat", "true").Run() == nil
	})
	return cfg
}

// natBin is a directory of the built binaries where potato-dispatch runs
// inside namespace ns: the dispatch and its ssh reach the host behind
// NAT, the other programs run here.
func natBin(t *testing.T, bin, ns string) string {
	t.Helper()
	dir := t.TempDir()
	ents, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		real := filepath.Join(bin, e.Name())
		if e.Name() == "potato-dispatch" {
			os.WriteFile(filepath.Join(dir, e.Name()), []byte("#!/bin/sh\nexec ip netns exec "+ns+" "+real+" \"$@\"\n"), 0o755)
			continue
		}
		if err := os.Symlink(real, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The fault: the link to the ssh host cut (every packet between lab and
// srv dropped in rtr) while the model, 600 MB, comes back. The dispatch
// runs in the lab namespace, the host's sshd in srv. Expected (SPEC F7):
// the copy sends nothing for the stall timeout (3 s here), the run keeps
// its predictions and writes them back, the model stays on the host, and
// the run log says so; the three witnesses agree. Once the link is back,
// no process of the run is left on the host and the next run succeeds.
func testRemoteLinkCutDuringCopyBack(t *testing.T) {
	ns := natNetns(t, "l")
	p, remoteDir := natSSHProject(t, ns)
	id, at := p.remoteUntilCopyBack()
	restore := natCut(t, ns)
	cut := time.Now()
	f := p.settled(id, rundir.StateSuccess, "", 120*time.Second)
	took := time.Since(cut)
	log := p.File(id, rundir.LogFile)
	stallMsg := "The copy from potato-nat sent nothing for 3 s: the run's predictions are already kept; only the model files are missing from artifacts/"
	if !strings.Contains(log, stallMsg) {
		t.Errorf("the run log lacks %q:\n%s", stallMsg, log)
	}
	job := filepath.Join(remoteDir, "jobs", id)
	produced := remoteLines(filepath.Join(job, "artifacts", "predictions.jsonl"))
	stored, kept := p.predictions(id)
	info := p.Info(id)
	if produced <= 0 || kept != produced || stored == 0 || info.Writeback["n_written"] != stored {
		t.Errorf("predictions: %d produced, %d kept, %d stored, writeback %v", produced, kept, stored, info.Writeback)
	}
	model := "gone from the host"
	if st, err := os.Stat(filepath.Join(job, "artifacts", "model.bin")); err == nil {
		model = fmt.Sprintf("stays on the host (%d MB)", st.Size()>>20)
	} else {
		t.Errorf("the model is not kept on the host: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.Root().RunDir(id), "artifacts", "model.bin")); err == nil {
		t.Errorf("a partial model.bin is in the run's artifacts/")
	}
	restore()
	if left := remoteLeftAfter(nil, id, 40*time.Second); len(left) > 0 {
		t.Errorf("processes of the run left on the host 40 s after the link came back:\n%s", strings.Join(left, "\n"))
	}
	// The cleanup through the cut link failed: the forwarded socket stays.
	socks, _ := filepath.Glob("/tmp/potato-" + id + "-*.sock")
	for _, s := range socks {
		os.Remove(s)
	}
	cleanup := "cleanup on the host done"
	if strings.Contains(log, "warning: cleaning up on potato-nat") {
		cleanup = "cleanup on the host timed out"
	}
	record(t, "link to the ssh host cut during the copy back (netns)",
		"F7: copy stalls; success with predictions written back; model stays on the host; run log says so; next run succeeds",
		fmt.Sprintf("%s %.1f s after the cut at %d of %d MB; %d predictions produced, %d kept, %d stored; model %s; log has F7's text; %s, %d forwarded socket(s) left in /tmp; %s",
			f, took.Seconds(), int64(at.Progress.Current)>>20, int64(at.Progress.Total)>>20, produced, kept, stored, model, cleanup, len(socks), p.nextRunSucceeds()))
}

// The fault: the link to the ssh host cut (every packet between lab and
// srv dropped in rtr) while the model, 600 MB, comes back, and restored
// about 6 s later. Expected: the copy stalls (3 s here), Collect waits 5 s,
// logs in again and fetches again, which resumes from the part kept; the
// run succeeds with the model whole, the run log says the copy was tried
// again, and the next run succeeds.
func testRemoteLinkDropDuringCopyBack(t *testing.T) {
	ns := natNetns(t, "d")
	p, remoteDir := natSSHProject(t, ns)
	id, at := p.remoteUntilCopyBack()
	restore := natCut(t, ns)
	cut := time.Now()
	// The host's model, read while the link is down: after a complete copy
	// the job directory goes.
	hostModel := filepath.Join(remoteDir, "jobs", id, "artifacts", "model.bin")
	wantSize, wantSum, err := fileSum(hostModel)
	if err != nil {
		t.Fatalf("the model on the host: %v", err)
	}
	time.Sleep(time.Until(cut.Add(6 * time.Second)))
	restore()
	down := time.Since(cut)
	f := p.settled(id, rundir.StateSuccess, "", 120*time.Second)
	took := time.Since(cut)
	log := p.File(id, rundir.LogFile)
	if !strings.Contains(log, "the copy from potato-nat broke off at ") || !strings.Contains(log, "trying again in 5 s, attempt 2 of 3") {
		t.Errorf("the run log does not say the copy was tried again:\n%s", log)
	}
	if strings.Contains(log, "sent nothing for 3 s: the run's predictions are already kept") {
		t.Errorf("the run ended as F7 after all:\n%s", log)
	}
	arts := filepath.Join(p.Root().RunDir(id), "artifacts")
	gotSize, gotSum, err := fileSum(filepath.Join(arts, "model.bin"))
	if err != nil {
		t.Errorf("the model did not come back: %v", err)
	} else if gotSize != wantSize || gotSum != wantSum {
		t.Errorf("model.bin: %d bytes, sha256 %s; on the host %d bytes, sha256 %s", gotSize, gotSum, wantSize, wantSum)
	}
	attempts := strings.Count(log, "the copy from potato-nat broke off at ") + 1
	method := "tar stream"
	if strings.Contains(log, "copying the model from potato-nat by rsync") {
		method = "rsync"
	}
	_, partErr := os.Stat(filepath.Join(arts, ".potato-partial"))
	stored, kept := p.predictions(id)
	record(t, "link to the ssh host dropped and restored during the copy back (netns)",
		"copy stalls; tried again on a new connection after 5 s, resuming from the part kept; success; model whole; run log says it tried again; next run succeeds",
		fmt.Sprintf("%s %.1f s after the cut at %d of %d MB (link down %.1f s); %d attempts, the last by %s; model.bin %d MB, sha256 as on the host: %v; part kept left: %v; %d predictions kept, %d stored; %s",
			f, took.Seconds(), int64(at.Progress.Current)>>20, int64(at.Progress.Total)>>20, down.Seconds(), attempts, method,
			gotSize>>20, gotSum == wantSum && gotSize == wantSize, partErr == nil, kept, stored, p.nextRunSucceeds()))
}

// fileSum is the size and the hex sha256 of the file at path.
func fileSum(path string) (int64, string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer fh.Close()
	h := sha256.New()
	n, err := io.Copy(h, fh)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
