//go:build faults

package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/rundir"
)

// row is one line of the table.
type row struct{ fault, expected, seen string }

var (
	tableMu sync.Mutex
	table   []row
)

// Record adds the fault's row to the table; a failed test marks it.
func record(t *testing.T, fault, expected, seen string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			seen = "FAILED: " + seen
		}
		tableMu.Lock()
		table = append(table, row{fault, expected, seen})
		tableMu.Unlock()
	})
}

func TestMain(m *testing.M) {
	code := testcli.Main(m)
	tableMu.Lock()
	defer tableMu.Unlock()
	if len(table) > 0 {
		w := [3]int{len("fault"), len("expected"), len("seen")}
		for _, r := range table {
			w[0], w[1], w[2] = max(w[0], len(r.fault)), max(w[1], len(r.expected)), max(w[2], len(r.seen))
		}
		line := func(a, b, c string) { fmt.Printf("%-*s | %-*s | %s\n", w[0], a, w[1], b, c) }
		fmt.Println()
		line("fault", "expected", "seen")
		line(strings.Repeat("-", w[0]), strings.Repeat("-", w[1]), strings.Repeat("-", w[2]))
		for _, r := range table {
			line(r.fault, r.expected, r.seen)
		}
	}
	os.Exit(code)
}

// apiKey is the admin API key of every project here, for the page's API.
const apiKey = "faults-admin-key"

// project is a Potato project with a store Potato created, whose
// model_training block ends with block.
type project struct {
	*testproject.Runs
	t     *testing.T
	store string
}

// newProject writes a project of n items, labelled of them labelled, in
// dir ("" = a new temporary directory).
func newProject(t *testing.T, dir string, n, labelled int, block string) *project {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	p := &project{t: t, Runs: &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir}}
	p.Config = testproject.Write(t, dir, n, labelled, block)
	testproject.SetAPIKey(t, p.Config, apiKey)
	p.store = teststore.PotatoStore(t, filepath.Join(dir, "project.sqlite"))
	return p
}

// endless is a fit that lasts until the fault stops it or the test
// releases it (testproject.Endless), whatever the machine's speed; a
// released fit ends with the built-in trainer run by worker, a path or a
// glob on the machine that trains.
func (p *project) endless(worker string) *testproject.Endless {
	p.t.Helper()
	return testproject.NewEndless(p.t, testcli.SharedDir(p.t, 0o755), worker)
}

// localEndless is endless for a run whose built-in trainer is this
// machine's potato-agent: the local backend, or a polling agent here.
func (p *project) localEndless() *testproject.Endless {
	return p.endless(filepath.Join(p.Bin, "potato-agent"))
}

// proc is a process as the test found it: its pid and command line.
type proc struct {
	pid int
	cmd string
}

// gone reports whether the process has exited: its pid is no longer a
// process with its command line (a zombie has none).
func (pr proc) gone() bool { return remoteCmdline(pr.pid) != pr.cmd }

// trainer is the run's training process, by the pid its run log names;
// the test fails when the log names none, or the process is gone.
func (p *project) trainer(id string) proc {
	p.t.Helper()
	var pid int
	testproject.WaitFor(p.t, "the run log to name the training process", func() bool {
		pid = p.TrainerPID(id)
		return pid > 0 || p.Info(id).Finished
	})
	pr := proc{pid, remoteCmdline(pid)}
	if pid == 0 || pr.cmd == "" {
		p.t.Fatalf("no training process: the run log names pid %d, whose command line is %q\n%s", pid, pr.cmd, p.dump(id))
	}
	return pr
}

// fitting waits until the run's training process has reported progress,
// and returns the run then; a run that ends first fails the test.
func (p *project) fitting(t *testing.T, id string) rundir.Info {
	t.Helper()
	var i rundir.Info
	testproject.WaitFor(t, "the fit", func() bool {
		if i = p.Info(id); i.Finished {
			t.Fatalf("the run ended before the fault: %s %s\n%s", i.State, i.Error, p.dump(id))
		}
		return i.State == rundir.StateRunning && i.Progress != nil
	})
	return i
}

// dump is a run's logs, for a failure's message.
func (p *project) dump(id string) string {
	return "run.log:\n" + p.File(id, rundir.LogFile) + "\nagent.log:\n" + p.File(id, "agent.log")
}

// final is a run's end as each of its three witnesses tells it.
type final struct {
	file, store, page string // state/error_code
}

func (f final) String() string {
	return fmt.Sprintf("run.json %s, store %s, page %s", f.file, f.store, f.page)
}

// settled waits for the run's end as potato-dispatch status --json tells
// it (which settles a run whose dispatch is gone), then reads the store
// and the page, and fails the test unless all three say state with
// error_code code (code "" for a success or a cancel).
func (p *project) settled(id, state, code string, bound time.Duration) final {
	p.t.Helper()
	var rec rundir.Record
	deadline := time.Now().Add(bound)
	for {
		out, err := p.Command("potato-dispatch", "status", p.Config, id, "--json").Output()
		if err != nil {
			p.t.Fatalf("status --json: %v", err)
		}
		if err := json.Unmarshal(out, &rec); err != nil {
			p.t.Fatalf("status --json: %v: %s", err, out)
		}
		if rundir.Finished(rec.State) {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the run did not end within %s: %s\n%s", bound, rec.State, p.File(id, rundir.LogFile))
		}
		time.Sleep(200 * time.Millisecond)
	}
	f := final{file: rec.State + "/" + rec.ErrorCode}
	db := teststore.OpenDB(p.t, p.store)
	var status, ecode string
	if err := db.QueryRow(`SELECT status, COALESCE(error_code, '') FROM training_runs WHERE run_id = ?`, id).Scan(&status, &ecode); err != nil {
		p.t.Errorf("the store has no row for run %s: %v", id, err)
	}
	f.store = status + "/" + ecode
	f.page = p.page(id)
	want := state + "/" + code
	if f.file != want || f.page != want || f.store != want {
		p.t.Errorf("the witnesses disagree, want %s: %s\n%s", want, f, p.File(id, rundir.LogFile))
	}
	return f
}

// page is the run's state/error_code as potato-server's API, which the
// Training page reads, tells it.
func (p *project) page(id string) string {
	p.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := exec.Command(filepath.Join(p.Bin, "potato-server"), p.Config, "--listen", addr)
	if err := srv.Start(); err != nil {
		p.t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var body []byte
	testproject.WaitFor(p.t, "the page's API", func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/training/api/runs/"+id, nil)
		req.Header.Set("X-API-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	var rec struct {
		State     string `json:"state"`
		ErrorCode string `json:"error_code"`
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		p.t.Fatalf("the page's API: %v: %s", err, body)
	}
	return rec.State + "/" + rec.ErrorCode
}

// predictions counts the predictions a run produced and where they are:
// rows in Potato's store, and lines of the run's predictions.jsonl.
func (p *project) predictions(id string) (stored, kept int) {
	p.t.Helper()
	db := teststore.OpenDB(p.t, p.store)
	db.QueryRow(`SELECT COUNT(*) FROM training_predictions WHERE run_id = ?`, id).Scan(&stored)
	if b, err := os.ReadFile(filepath.Join(p.Root().RunDir(id), rundir.PredictionsFile)); err == nil {
		kept = strings.Count(string(b), "\n")
	}
	return stored, kept
}

// nextRunSucceeds runs the built-in trainer on the backend and fails the
// test unless it succeeds: the fault left nothing that blocks the queue.
func (p *project) nextRunSucceeds(args ...string) string {
	p.t.Helper()
	r := p.Run(append([]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment"}, args...)...)
	if r.Code != 0 {
		p.t.Errorf("the next run: exit %d: %s\n%s", r.Code, r.Stderr, p.File(r.ID, rundir.LogFile))
		return "next run failed"
	}
	return "next run succeeds"
}
