// Command benchagents is the workload of scripts/bench-agents: potato-server
// under many polling agents, and the bundle download of SPEC P3, on
// loopback with the built binaries.
//
// The agents are simulated: -agents goroutines in this process, each with
// its own agentproto.Client and so its own HTTP connection, each POSTing a
// claim (the backend's token, {"backend","host","workdir","version"}) and
// again at once after every 204. The server sees the requests a real
// potato-agent sends; a thousand potato-agent processes would not fit a
// small machine. Over the -window the bench reports the server's CPU
// (utime+stime from /proc/PID/stat, as a share of one core) and its peak RSS
// (VmHWM), and counts the connections to the server's port that are
// ESTABLISHED and the claims in flight, to show the polls are concurrent.
//
// During the window -runs runs are started one after another (B6: one run
// executes at a time) with "potato-dispatch run --detach". The claim
// latency of a run is the time from its socket appearing (runs/ID/agent.sock,
// or run.json's agent_socket, polled every millisecond) to the moment a
// simulated agent has the 200 answer to its claim. That agent then posts a
// failed result with the run's token, which ends the run and frees the
// queue; every run must have been handed to exactly one agent.
//
// P3: a project whose items hold random base64 text gives a bundle of about
// -bundle-mb MB. One claim, then -n rounds of a download through
// potato-server by agentproto.Client.DownloadBundle (which also fsyncs the
// file and checks its sha256) and by curl, in alternating order, and
// curl straight to the dispatch's socket (a unix socket, not TCP). The
// CPU each download took (the client's is this process's, which does
// nothing else meanwhile) and this machine's sha256 rate say where the
// client's time goes. Then a fault injector, a TCP proxy between the client and
// the server, cuts the connection once after half the bundle; the client
// resumes with a Range request; the proxy's bytes after the cut, over the
// bytes the client lacked then, say what a resume costs (target at most
// 1.05).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
)

const tb = benchkit.T("benchagents")

func fatalf(format string, args ...any) { tb.Fatalf(format, args...) }

const backendName = "lab"

func main() {
	bin := flag.String("bin", "bin", "directory of the built binaries")
	work := flag.String("work", "", "scratch directory (short: run sockets live under it)")
	agents := flag.Int("agents", 1000, "simulated agents (0: only P3)")
	window := flag.Duration("window", 60*time.Second, "measuring window")
	runs := flag.Int("runs", 20, "runs started during the window")
	bundleMB := flag.Int("bundle-mb", 200, "bundle size for P3 (MB)")
	n := flag.Int("n", 5, "download rounds for P3")
	flag.Parse()
	if *work == "" {
		fatalf("-work is required")
	}
	b, err := filepath.Abs(*bin)
	if err != nil {
		fatalf("%v", err)
	}
	*bin = b
	raiseNofile(*agents)

	if *agents > 0 {
		pollBench(*bin, filepath.Join(*work, "a"), *agents, *window, *runs)
	}
	bundleBench(*bin, filepath.Join(*work, "b"), *bundleMB, *n)
}

// raiseNofile lifts this process's open-file limit, soft and hard, so
// that its agents' connections fit and potato-server, its child,
// inherits a limit its side of them fits (checked after its start).
func raiseNofile(agents int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fatalf("getrlimit: %v", err)
	}
	want := uint64(2*agents + 1024)
	if lim.Max < want {
		lim.Max = want // root may raise the hard limit
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fatalf("setrlimit RLIMIT_NOFILE %d: %v (run as root, or raise ulimit -n)", lim.Max, err)
	}
}

// project writes a project with one agent backend and issues its token.
func project(dir string) (cfg string, root *rundir.Root, token string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatalf("%v", err)
	}
	cfg = testproject.Write(tb, dir, 200, 150, `  backend: lab
  backends:
    lab:
      type: agent
      heartbeat_timeout_s: 600
`)
	root = &rundir.Root{Dir: filepath.Join(dir, "annotation_output", "training")}
	token, err := root.IssueToken(backendName, time.Now())
	if err != nil {
		fatalf("issuing the token: %v", err)
	}
	return cfg, root, token
}

// startServer starts potato-server and checks that its open-file limit
// holds -agents connections.
func startServer(bin, cfg, dir string, agents int) *benchkit.Server {
	s := benchkit.StartServer(tb, bin, cfg, dir)
	need := uint64(agents + 256)
	if soft := nofileOf(s.Pid()); soft < need {
		arg := fmt.Sprintf("--nofile=%d:%d", need, need)
		if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(s.Pid()), arg).CombinedOutput(); err != nil {
			s.Stop()
			fatalf("potato-server's open-file limit is %d, under %d, and prlimit failed: %v %s", soft, need, err, out)
		}
	}
	return s
}

// nofileOf is a process's soft open-file limit, from /proc/PID/limits.
func nofileOf(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		fatalf("%v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			f := strings.Fields(strings.TrimPrefix(line, "Max open files"))
			if len(f) > 0 {
				if f[0] == "unlimited" {
					return 1 << 62
				}
				v, _ := strconv.ParseUint(f[0], 10, 64)
				return v
			}
		}
	}
	fatalf("no open-file limit in /proc/%d/limits", pid)
	return 0
}

// established counts the TCP connections in state ESTABLISHED whose local
// port is port: the server's side of its clients' connections.
func established(port int) int {
	count := 0
	for _, p := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "01" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if v, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(v) == port {
				count++
			}
		}
	}
	return count
}

type claimed struct {
	agent int
	runID string
	at    time.Time
}

// agentSim is one simulated agent: claim, and again at once after a 204;
// a run it gets it ends at once with a failed result.
func agentSim(ctx context.Context, i int, addr, token string, inflight, polls, errs *atomic.Int64, got chan<- claimed) {
	c, err := agentproto.NewClient("http://"+addr, token, agentproto.ClientOptions{})
	if err != nil {
		fatalf("%v", err)
	}
	req := agentproto.ClaimRequest{Backend: backendName, Host: fmt.Sprintf("sim-%04d", i),
		Workdir: fmt.Sprintf("/var/tmp/sim-%04d", i), Version: "bench"}
	for ctx.Err() == nil {
		inflight.Add(1)
		cl, err := c.Claim(ctx, req)
		at := time.Now()
		inflight.Add(-1)
		if ctx.Err() != nil {
			return
		}
		polls.Add(1)
		if err != nil {
			errs.Add(1)
			fmt.Fprintf(os.Stderr, "benchagents: agent %d: %v\n", i, err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if cl == nil {
			continue
		}
		got <- claimed{agent: i, runID: cl.RunID, at: at}
		rc, err := c.WithToken(cl.RunToken)
		if err == nil {
			err = rc.PostResult(ctx, cl.RunID, agentproto.Result{ExitCode: 1, Error: "bench"})
		}
		if err != nil && ctx.Err() == nil {
			errs.Add(1)
			fmt.Fprintf(os.Stderr, "benchagents: agent %d: run %s: %v\n", i, cl.RunID, err)
		}
	}
}

// detach starts a run in the background and returns its id.
func detach(bin, cfg string) string {
	out, err := exec.Command(filepath.Join(bin, "potato-dispatch"), "run", cfg, "--detach",
		"--trainer", "tfidf-logreg", "--schemas", "sentiment").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			fatalf("potato-dispatch run --detach: %v: %s", err, ee.Stderr)
		}
		fatalf("potato-dispatch run --detach: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// socketAppears polls, every millisecond, for the run's socket and
// returns when it is there.
func socketAppears(root *rundir.Root, id string) time.Time {
	def := filepath.Join(root.RunDir(id), rundir.SocketFile)
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		if isSocket(def) {
			return time.Now()
		}
		if i%20 == 0 {
			if info, err := root.Read(id); err == nil {
				if info.AgentSocket != "" && isSocket(info.AgentSocket) {
					return time.Now()
				}
				if info.Finished {
					fatalf("run %s ended before its socket appeared: %s", id, info.Error)
				}
			}
		}
		if time.Now().After(deadline) {
			fatalf("run %s: no socket within 2 minutes", id)
		}
		time.Sleep(time.Millisecond)
	}
}

func isSocket(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&os.ModeSocket != 0
}

func waitFinished(root *rundir.Root, id string) rundir.Info {
	var info rundir.Info
	testproject.WaitFor(tb, "run "+id+" to end", func() bool {
		i, err := root.Read(id)
		info = i
		return err == nil && i.Finished
	})
	return info
}

func pollBench(bin, dir string, agents int, window time.Duration, runs int) {
	cfg, root, token := project(dir)
	srv := startServer(bin, cfg, dir, agents)
	defer srv.Stop()
	pid := srv.Pid()
	_, portStr, _ := net.SplitHostPort(srv.Addr)
	port, _ := strconv.Atoi(portStr)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var inflight, polls, errs atomic.Int64
	got := make(chan claimed, runs+16)
	// A ramp of a few seconds, not one burst of SYNs.
	for i := 0; i < agents; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); agentSim(ctx, i, srv.Addr, token, &inflight, &polls, &errs, got) }()
		if i%100 == 99 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	testproject.WaitFor(tb, "every agent's claim to be in flight", func() bool {
		return inflight.Load() == int64(agents) && established(port) >= agents
	})
	time.Sleep(time.Second)

	minEst, maxEst, minIn := 1<<30, 0, int64(1<<30)
	sample := func() {
		e := established(port)
		minEst, maxEst = min(minEst, e), max(maxEst, e)
		minIn = min(minIn, inflight.Load())
	}
	polls0 := polls.Load()
	t0, c0 := time.Now(), benchkit.CPUTicks(tb, pid)
	var busy time.Duration
	var busyTicks int64
	var lat []float64
	perRun := map[string][]int{}
	for i := 0; i < runs; i++ {
		if d := time.Until(t0.Add(window * time.Duration(i) / time.Duration(runs))); d > 0 {
			time.Sleep(d)
		}
		sample()
		b0, bc0 := time.Now(), benchkit.CPUTicks(tb, pid)
		id := detach(bin, cfg)
		sockAt := socketAppears(root, id)
		var c claimed
		select {
		case c = <-got:
		case <-time.After(2 * time.Minute):
			fatalf("run %s: no agent claimed it within 2 minutes", id)
		}
		if c.runID != id {
			fatalf("an agent claimed run %s while run %s was queued", c.runID, id)
		}
		perRun[id] = append(perRun[id], c.agent)
		lat = append(lat, c.at.Sub(sockAt).Seconds())
		info := waitFinished(root, id)
		busy += time.Since(b0)
		busyTicks += benchkit.CPUTicks(tb, pid) - bc0
		if info.State == rundir.StateSuccess {
			fatalf("run %s: state %s, want the failure the bench reported", id, info.State)
		}
		if log, _ := os.ReadFile(filepath.Join(root.RunDir(id), "run.log")); strings.Count(string(log), "claimed the run") != 1 {
			fatalf("run %s: claimed %d times, want once:\n%s", id, strings.Count(string(log), "claimed the run"), log)
		}
	}
	if d := time.Until(t0.Add(window)); d > 0 {
		time.Sleep(d)
	}
	sample()
	elapsed, ticks := time.Since(t0), benchkit.CPUTicks(tb, pid)-c0
	pollsIn := polls.Load() - polls0
	// Claims that came in after the last run are more than its one.
	select {
	case c := <-got:
		fatalf("agent %d claimed run %s too, which was handed out already", c.agent, c.runID)
	case <-time.After(500 * time.Millisecond):
	}
	hwm := benchkit.StatusKB(tb, pid, "VmHWM")
	nofile := nofileOf(pid)
	cancel()
	wg.Wait()
	for id, who := range perRun {
		if len(who) != 1 {
			fatalf("run %s went to %d agents: %v", id, len(who), who)
		}
	}

	share := benchkit.Share
	fmt.Printf("%d agents, %.0f s: potato-server CPU %.1f%% of a core (target under 5%%), peak RSS %.0f MB (target under 150 MB)\n",
		agents, elapsed.Seconds(), share(ticks, elapsed), float64(hwm)/1024)
	fmt.Printf("  between runs %.1f%% of a core over %.0f s; during the %d runs %.1f%% over %.1f s\n",
		share(ticks-busyTicks, elapsed-busy), (elapsed - busy).Seconds(), runs, share(busyTicks, busy), busy.Seconds())
	fmt.Printf("  simulated agents (goroutines with one HTTP connection each, not potato-agent processes); ESTABLISHED to the server's port %d..%d, claims in flight at least %d; %d claims answered in the window (%.0f/s), %d errors; server open-file limit %d\n",
		minEst, maxEst, minIn, pollsIn, float64(pollsIn)/elapsed.Seconds(), errs.Load(), nofile)
	sort.Float64s(lat)
	fmt.Printf("claim latency over %d runs: p50 %.3f s, p99 %.3f s, max %.3f s (from the run's agent.sock appearing, polled every 1 ms, to an agent's 200; each run claimed by exactly one agent)\n",
		len(lat), benchkit.Quantile(lat, 0.50), benchkit.Quantile(lat, 0.99), lat[len(lat)-1])
	fmt.Printf("  latencies (s, sorted): %s\n", list(lat, "%.3f"))
}

func list(xs []float64, format string) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf(format, x))
	}
	return strings.Join(s, " ")
}

// bigItems appends unlabelled items of random base64 text to the
// project's data file, about mb MB of gzipped bundle: base64 packs 6 bits
// in 8, which gzip gets back, and no more.
func bigItems(dir string, mb int) {
	f, err := os.OpenFile(filepath.Join(dir, "data", "items.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fatalf("%v", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	raw := make([]byte, 12<<10)
	text := make([]byte, base64.StdEncoding.EncodedLen(len(raw)))
	for n, i := int64(0), 1; n < int64(mb)<<20; i++ {
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		base64.StdEncoding.Encode(text, raw)
		fmt.Fprintf(w, "{\"id\":\"big%d\",\"text\":\"%s\"}\n", i, text)
		n += int64(len(raw))
	}
	if err := w.Flush(); err != nil {
		fatalf("%v", err)
	}
	if err := f.Close(); err != nil {
		fatalf("%v", err)
	}
}

func bundleBench(bin, dir string, mb, n int) {
	cfg, root, token := project(dir)
	bigItems(dir, mb)
	srv := startServer(bin, cfg, dir, 16)
	defer srv.Stop()
	ctx := context.Background()
	base := "http://" + srv.Addr
	c, err := agentproto.NewClient(base, token, agentproto.ClientOptions{})
	if err != nil {
		fatalf("%v", err)
	}
	id := detach(bin, cfg)
	var cl *agentproto.Claim
	deadline := time.Now().Add(5 * time.Minute) // packing a big bundle takes a while
	for cl == nil {
		if time.Now().After(deadline) {
			fatalf("run %s: no claim within 5 minutes", id)
		}
		if cl, err = c.Claim(ctx, agentproto.ClaimRequest{Backend: backendName, Host: "bench", Workdir: dir, Version: "bench"}); err != nil {
			fatalf("%v", err)
		}
	}
	defer func() {
		if rc, err := c.WithToken(cl.RunToken); err == nil {
			_ = rc.PostResult(ctx, cl.RunID, agentproto.Result{ExitCode: 1, Error: "bench"})
		}
		waitFinished(root, cl.RunID)
	}()
	rc, err := c.WithToken(cl.RunToken)
	if err != nil {
		fatalf("%v", err)
	}
	size := cl.Bundle.Bytes
	sizeMB := float64(size) / (1 << 20)

	// curl reads the header from a file, so the token is on no command line.
	hdr := filepath.Join(dir, "auth-header")
	if err := os.WriteFile(hdr, []byte("Authorization: Bearer "+cl.RunToken+"\n"), 0o600); err != nil {
		fatalf("%v", err)
	}
	defer os.Remove(hdr)
	route := agentproto.PathPrefix + "/runs/" + cl.RunID + "/bundle"
	info, err := root.Read(cl.RunID)
	if err != nil {
		fatalf("%v", err)
	}
	sock := info.AgentSocket
	if sock == "" {
		sock = filepath.Join(root.RunDir(cl.RunID), rundir.SocketFile)
	}
	dst := filepath.Join(dir, "bundle.tar.gz")
	// curl's file is fsynced after its run, apart from its time, to know
	// what the durability the client pays for costs on this disk.
	var curlSynced, curlCPU, clientCPU []float64
	curl := func(cpu *[]float64, args ...string) float64 {
		os.Remove(dst)
		t0 := time.Now()
		cmd := exec.Command("curl", append([]string{"-sS", "-f", "-H", "@" + hdr, "-o", dst}, args...)...)
		out, err := cmd.CombinedOutput()
		d := time.Since(t0).Seconds()
		if err != nil {
			fatalf("curl: %v %s", err, out)
		}
		if cpu != nil {
			*cpu = append(*cpu, cpuOf(cmd.ProcessState.SysUsage().(*syscall.Rusage)))
		}
		if st, err := os.Stat(dst); err != nil || st.Size() != size {
			fatalf("curl got %v bytes, want %d", st, size)
		}
		t1 := time.Now()
		if f, err := os.OpenFile(dst, os.O_WRONLY, 0); err == nil {
			f.Sync()
			f.Close()
		}
		curlSynced = append(curlSynced, sizeMB/(d+time.Since(t1).Seconds()))
		os.Remove(dst)
		return sizeMB / d
	}
	// The client's time, and that of its transfer alone: the last byte
	// written, before the fsync and the sha256 check.
	var transfer []float64
	client := func() float64 {
		os.Remove(dst)
		var last time.Time
		// This process does nothing else meanwhile: its CPU is the client's.
		var ru0, ru1 syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		t0 := time.Now()
		if err := rc.DownloadBundle(ctx, cl.RunID, dst, cl.Bundle, func(done, total int64) {
			if done == total {
				last = time.Now()
			}
		}); err != nil {
			fatalf("%v", err)
		}
		d := time.Since(t0).Seconds()
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		clientCPU = append(clientCPU, cpuOf(&ru1)-cpuOf(&ru0))
		transfer = append(transfer, sizeMB/last.Sub(t0).Seconds())
		os.Remove(dst)
		return sizeMB / d
	}
	var viaClient, viaCurl, direct []float64
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			viaClient = append(viaClient, client())
			viaCurl = append(viaCurl, curl(&curlCPU, base+route))
		} else {
			viaCurl = append(viaCurl, curl(&curlCPU, base+route))
			viaClient = append(viaClient, client())
		}
		direct = append(direct, curl(nil, "--unix-socket", sock, "http://agent"+route))
	}
	os.Remove(hdr)
	fmt.Printf("P3 bundle download %.0f MB/s / curl %.0f MB/s = %.2f (target at least 0.9; %.0f MB bundle through potato-server, median of %d, alternating; the client also hashes and fsyncs)\n",
		benchkit.Median(viaClient), benchkit.Median(viaCurl), benchkit.Median(viaClient)/benchkit.Median(viaCurl), sizeMB, n)
	fmt.Printf("  the client's transfer alone, to its last byte written: %.0f MB/s = %.2f of curl's; the rest is its fsync and rename\n",
		benchkit.Median(transfer), benchkit.Median(transfer)/benchkit.Median(viaCurl))
	fmt.Printf("  curl then an fsync of its file %.0f MB/s: the client = %.2f of it\n",
		benchkit.Median(curlSynced), benchkit.Median(viaClient)/benchkit.Median(curlSynced))
	fmt.Printf("  curl straight to the dispatch's unix socket %.0f MB/s: through the server = %.2f of it\n",
		benchkit.Median(direct), benchkit.Median(viaCurl)/benchkit.Median(direct))
	fmt.Printf("  CPU per download: the client %.2f s, curl %.2f s; the sha256 alone takes %.2f s of it (%.0f MB/s on this machine's %d cores)\n",
		benchkit.Median(clientCPU), benchkit.Median(curlCPU), sizeMB/sha256Rate(), sha256Rate(), runtime.NumCPU())
	fmt.Printf("  client %s MB/s; curl %s MB/s; curl to the socket %s MB/s\n",
		list(viaClient, "%.0f"), list(viaCurl, "%.0f"), list(direct, "%.0f"))

	// The fault injector.
	p := newCutter(srv.Addr, size/2)
	defer p.close()
	pc, err := agentproto.NewClient("http://"+p.addr(), cl.RunToken, agentproto.ClientOptions{})
	if err != nil {
		fatalf("%v", err)
	}
	os.Remove(dst)
	// had is what the client had written when its first connection was
	// cut: its last progress before a second connection.
	var had int64
	if err := pc.DownloadBundle(ctx, cl.RunID, dst, cl.Bundle, func(done, total int64) {
		if p.conns.Load() == 1 {
			had = done
		}
	}); err != nil {
		fatalf("the download through the fault injector: %v", err)
	}
	os.Remove(dst)
	passed, conns, atCut := p.passed.Load(), p.conns.Load(), p.atCut.Load()
	if !p.didCut.Load() {
		fatalf("the fault injector never cut the connection")
	}
	after, missing := passed-atCut, size-had
	fmt.Printf("P3 resume: %.1f MB sent after the cut for the %.1f MB the client lacked = %.4f (target at most 1.05; response headers included; cut at %.0f MB of %.1f by a fault-injecting proxy in the bench; %d connections)\n",
		float64(after)/(1<<20), float64(missing)/(1<<20), float64(after)/float64(missing), float64(p.cutAt)/(1<<20), sizeMB, conns)
}

// cutter is a fault injector: a TCP proxy to target that counts the bytes
// it passes from the server to the client and, once, closes both ends of
// the connection after cutAt of them.
type cutter struct {
	l      net.Listener
	target string
	cutAt  int64
	passed atomic.Int64
	atCut  atomic.Int64 // passed when it cut
	conns  atomic.Int64
	didCut atomic.Bool
}

func newCutter(target string, cutAt int64) *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("%v", err)
	}
	p := &cutter{l: l, target: target, cutAt: cutAt}
	go p.serve()
	return p
}

func (p *cutter) addr() string { return p.l.Addr().String() }
func (p *cutter) close()       { p.l.Close() }

func (p *cutter) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.conns.Add(1)
		go p.pipe(c)
	}
}

func (p *cutter) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	go func() { io.Copy(s, c); s.(*net.TCPConn).CloseWrite() }()
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			w, werr := c.Write(buf[:n])
			total := p.passed.Add(int64(w))
			if werr != nil {
				return
			}
			if total >= p.cutAt && p.didCut.CompareAndSwap(false, true) {
				p.atCut.Store(total)
				return // the cut: both connections close
			}
		}
		if err != nil {
			return
		}
	}
}

func cpuOf(ru *syscall.Rusage) float64 {
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// sha256Rate is the MB/s of sha256 on one core of this machine, which the
// client computes over every byte it downloads.
var sha256Rate = sync.OnceValue(func() float64 {
	buf := make([]byte, 1<<20)
	h := sha256.New()
	t0 := time.Now()
	for range 256 {
		h.Write(buf)
	}
	return 256 / time.Since(t0).Seconds()
})
