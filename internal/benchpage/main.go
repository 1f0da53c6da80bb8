// Command benchpage is the workload of scripts/bench-page: the CPU time of
// potato-server while the Training page polls it, in a real headless
// Chromium, against the built binaries on loopback.
//
// The project holds -history finished runs (records, logs, exit codes, as
// potato-dispatch leaves them) and one run executing, a local run whose
// trainer sleeps, so that the page polls at its busy rate (GET
// /admin/training/api/runs every 2 s; 10 s when no run is queued or
// executing; GET .../backends every 30 s). The server's CPU
// (utime+stime from /proc/PID/stat, as a share of one core) is measured
// over -window with no page open, then with each count of -pages tabs
// signed in and showing the page. The tabs' own Resource Timing entries
// say how many polls the server answered and how long each took.
// The page asks for the newest 50 runs; the server reads every record to
// answer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

const tb = benchkit.T("benchpage")

const key = "bench-key"

func main() {
	bin := flag.String("bin", "bin", "directory of the built binaries")
	work := flag.String("work", "", "a scratch directory")
	window := flag.Duration("window", 60*time.Second, "how long each measurement lasts")
	history := flag.Int("history", 300, "finished runs on record")
	pages := flag.String("pages", "1,10", "numbers of tabs showing the page, one measurement each")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*pages, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("-pages: %q is not a count of tabs", f)
		}
		if len(counts) > 0 && n <= counts[len(counts)-1] {
			tb.Fatalf("-pages: the counts must grow: tabs opened stay open")
		}
		counts = append(counts, n)
	}
	exe, err := exec.LookPath("chromium")
	if err != nil {
		tb.Fatalf("no chromium on PATH: scripts/install-deps installs it")
	}

	cfg, root := project(*work, *history)
	srv := benchkit.StartServer(tb, *bin, cfg, *work)
	defer srv.Stop()
	long := startLongRun(*bin, *work, cfg, root)
	defer func() { _ = root.RequestCancel(long) }()

	idle := cpu(srv.Pid(), *window)
	fmt.Printf("%d runs on record and one executing; potato-server CPU over %.0f s, as a share of one core:\n", *history+1, window.Seconds())
	fmt.Printf("  no page open:      %.2f%%\n", idle)

	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.UserDataDir(filepath.Join(*work, "chromium")))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	first, cancelFirst := chromedp.NewContext(actx)
	defer cancelFirst()
	base := "http://" + srv.Addr + "/admin/training"
	if err := chromedp.Do(first, chromedp.Navigate(base+"/login"), chromedp.SetValue(chromedp.ID("key"), key),
		chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.ID("runs"))); err != nil {
		tb.Fatalf("signing in: %v", err)
	}
	tabs := []context.Context{first}
	for _, n := range counts {
		for len(tabs) < n {
			ctx, cancel := chromedp.NewContext(first)
			defer cancel()
			if err := chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.ID("runs"))); err != nil {
				tb.Fatalf("opening tab %d: %v", len(tabs)+1, err)
			}
			tabs = append(tabs, ctx)
		}
		// Let the new tabs settle into their polling, then count from now.
		time.Sleep(3 * time.Second)
		before := make([]int, n)
		for i, ctx := range tabs[:n] {
			before[i] = len(polls(ctx))
		}
		share := cpu(srv.Pid(), *window)
		var all []float64
		answered := 0
		for i, ctx := range tabs[:n] {
			p := polls(ctx)
			answered += len(p) - before[i]
			all = append(all, p[before[i]:]...)
		}
		if len(all) == 0 {
			tb.Fatalf("%d tab(s): no poll of the runs in %s", n, *window)
		}
		slices.Sort(all)
		fmt.Printf("  %2d page(s) open:   %.2f%%  (%d GET .../api/runs answered, %.2f per second; in the browser each took p50 %.1f ms, max %.1f ms)\n",
			n, share, answered, float64(answered)/window.Seconds(), benchkit.Quantile(all, 0.5), all[len(all)-1])
	}
	fmt.Printf("  one answer of the page's GET /admin/training/api/runs?limit=50&current=1: %d bytes; of GET .../runs, all %d runs: %d bytes\n",
		runsSize(srv.Addr, "?limit=50&current=1"), *history+1, runsSize(srv.Addr, ""))
}

// project writes a project with admin_api_key and history finished runs.
func project(dir string, history int) (string, *rundir.Root) {
	cfg := testproject.Write(tb, dir, 200, 150, "")
	testproject.SetAPIKey(tb, cfg, key)
	root, err := rundir.Open(filepath.Join(dir, "annotation_output", "training"))
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now().Add(-time.Duration(history) * time.Hour)
	for i := 0; i < history; i++ {
		created := start.Add(time.Duration(i) * time.Hour).UTC()
		began, ended := created.Add(time.Second), created.Add(95*time.Second)
		code := 0
		id := rundir.NewID(created)
		rec := rundir.Record{
			RunID: id, Trainer: "tfidf-logreg", Schemas: []string{"sentiment"}, Params: map[string]string{},
			Backend: "local", BackendType: "local", RanOn: "local (this machine)", State: rundir.StateSuccess, Step: "finished",
			Progress: &rundir.Progress{Phase: "fit", Current: 30, Total: 30}, CreatedAt: created, StartedAt: &began,
			FinishedAt: &ended, ExitCode: &code, Heldout: &rundir.Heldout{Schema: "sentiment", N: 30, Accuracy: 0.8, MacroF1: 0.78},
			ArtifactURI: "file://" + filepath.Join(root.RunDir(id), "artifacts"), Trigger: "cron",
			Writeback: map[string]int{"n_read": 120, "n_written": 100}, Device: "cpu",
		}
		b, _ := json.MarshalIndent(rec, "", "  ")
		d := root.RunDir(id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
		for name, data := range map[string][]byte{rundir.RecordFile: b, rundir.ExitCodeFile: []byte("0\n"),
			rundir.LogFile: []byte(created.Format(time.RFC3339) + " run finished: success\n")} {
			if err := os.WriteFile(filepath.Join(d, name), data, 0o644); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return cfg, root
}

// startLongRun starts a local run whose trainer sleeps, and waits until
// it executes.
func startLongRun(bin, dir, cfg string, root *rundir.Root) string {
	trainer := testproject.Trainer(tb, dir, `echo '{"v":1,"event":"status","state":"running","step":"sleeping"}'
sleep 3600`)
	out, err := exec.Command(filepath.Join(bin, "potato-dispatch"), "run", cfg, "--trainer", trainer,
		"--schemas", "sentiment", "--backend", "local", "--detach").Output()
	if err != nil {
		tb.Fatalf("potato-dispatch run: %v", err)
	}
	id := strings.TrimSpace(string(out))
	testproject.WaitFor(tb, "the long run to execute", func() bool {
		info, err := root.Read(id)
		return err == nil && info.State == rundir.StateRunning
	})
	return id
}

// cpu is the server's CPU over d, as a percentage of one core.
func cpu(pid int, d time.Duration) float64 {
	t0, start := benchkit.CPUTicks(tb, pid), time.Now()
	time.Sleep(d)
	return benchkit.Share(benchkit.CPUTicks(tb, pid)-t0, time.Since(start))
}

// polls are the durations in ms of a tab's requests of the runs so far.
func polls(ctx context.Context) []float64 {
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`performance.setResourceTimingBufferSize(100000),
		performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === '/admin/training/api/runs').map(e => e.responseEnd - e.startTime)`))
	if err != nil {
		tb.Fatalf("reading the tab's resource timings: %v", err)
	}
	return v
}

func runsSize(addr, query string) int {
	out, err := exec.Command("curl", "-sS", "-H", "X-API-Key: "+key, "http://"+addr+"/admin/training/api/runs"+query).Output()
	if err != nil {
		tb.Fatalf("curl: %v", err)
	}
	return len(out)
}
