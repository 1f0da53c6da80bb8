package server

// The Training page in a real headless Chromium, driven over the DevTools
// protocol, against Server.Handler on loopback with the real
// potato-dispatch and potato-check: a local backend, an ssh backend to the
// test sshd of scripts/test-sshd, a SLURM backend (only its menu entry is
// used) and an agent backend whose agent polled two minutes ago. The only fake is the ssh host's nvidia-smi (this
// machine has no GPU).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"potato-training/internal/fakebin"
	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

var screenshots = flag.String("screenshots", "", "write the page's screenshots into this directory (make screenshots writes them into docs/)")

// chromium finds Debian's chromium. Without it the test skips, except
// under CI, where scripts/install-deps installs it.
func chromium(t *testing.T) string {
	testcli.Short(t, "it drives headless chromium")
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: scripts/install-deps installs it")
	}
	t.Skip("no chromium on PATH: install Debian's chromium (scripts/install-deps)")
	return ""
}

type browser struct {
	t   *testing.T
	ctx context.Context
	url string
	e   *apiEnv
}

// newBrowser serves a project with the three kinds of backend and opens
// a headless Chromium on it.
func newBrowser(t *testing.T) *browser {
	exe := chromium(t)
	sd := testcli.SSHD(t)
	fakes, remote := testcli.SharedDir(t, 0o755), testcli.SharedDir(t, 0o777)
	fakebin.NvidiaSMI(t, fakes, "0, GPU-aaaa, NVIDIA H200, 143771, 120000, 5, 9.0\n")
	e := newAPI(t, testKey, fmt.Sprintf(`  backend: gpu-server
  backends:
    gpu-server:
      type: ssh
      host: potato-test
      ssh_config: %s/ssh_config
      remote_dir: %s
      env: {PATH: "%s:/usr/local/bin:/usr/bin:/bin"}
    cluster:
      type: slurm
      host: login.cluster.example.org
      remote_dir: /scratch/potato
    lab-workstation:
      type: agent
`, sd, remote, fakes))
	// Short polls, so that the page shows each step of a run of a few
	// seconds; the default is 2 s.
	e.s.PagePoll, e.s.PageIdlePoll = 150*time.Millisecond, time.Second
	seen := time.Now().Add(-2*time.Minute - 5*time.Second)
	if _, err := e.s.Root.IssueToken("lab-workstation", seen.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Root.AgentSeen("lab-workstation", "ws-01", seen); err != nil {
		t.Fatal(err)
	}

	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return &browser{t: t, ctx: ctx, url: e.ts.URL, e: e}
}

// do runs steps in the page.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates expr in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (b *browser) text(expr string) string {
	b.t.Helper()
	return eval[string](b, expr)
}

// exec runs JavaScript for what it does.
func (b *browser) exec(js string) {
	b.t.Helper()
	eval[bool](b, js+"; true")
}

// waitJS waits until expr is true in the page. Its bound of 90 s is a
// guard against a hang, never a speed target.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !eval[bool](b, "!!("+expr+")") {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s\nthe page says:\n%s", what, b.text("document.body.innerText"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browser) cookies() []*network.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		b.t.Fatal(err)
	}
	return res.Cookies
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	if *screenshots == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// Column indexes of the Runs table.
const (
	colRanOn   = "3"
	colState   = "4"
	colScore   = "5"
	colTrigger = "7"
)

// cellText is, as JavaScript, the text of column col of run id's row in
// the Runs table ("" while there is no such row).
func cellText(id, col string) string {
	return fmt.Sprintf(`(((document.querySelector('#runs tr[data-run=%q]') || {cells: []}).cells[%s] || {}).textContent || "")`, id, col)
}

// newest is the run id of the table's first row.
const newest = `((document.querySelector("#runs tbody tr") || {dataset: {}}).dataset.run || "")`

// recordSteps keeps every text the step line shows from now on in
// window.steps.
const recordSteps = `window.steps = []; new MutationObserver(() => {
	const s = document.getElementById('step').textContent;
	if (window.steps[window.steps.length - 1] !== s) window.steps.push(s);
}).observe(document.getElementById('step'), {childList: true, characterData: true, subtree: true})`

func TestPageInBrowser(t *testing.T) {
	b := newBrowser(t)

	// The page sends a reader who is not signed in to the sign-in form,
	// which refuses a wrong key.
	b.do("opening the page", chromedp.Navigate(b.url+pagePath), chromedp.WaitVisible(chromedp.ID("key")))
	if loc := b.text("location.pathname"); loc != pagePath+"/login" {
		t.Fatalf("not signed in: at %s, want the sign-in form", loc)
	}
	b.do("a wrong key", chromedp.SendKeys(chromedp.ID("key"), "not-the-key"), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("error")))
	if msg := b.text("document.getElementById('error').textContent"); msg != msgWrongKey {
		t.Errorf("a wrong key: the page says %q, want %q", msg, msgWrongKey)
	}
	if loc := b.text("location.pathname"); loc != pagePath+"/login" {
		t.Errorf("a wrong key led to %s", loc)
	}
	if cookies := b.cookies(); len(cookies) != 0 {
		t.Errorf("a wrong key set cookies: %+v", cookies[0])
	}

	// The right key: a session cookie scripts cannot read.
	b.do("signing in", chromedp.SetValue(chromedp.ID("key"), testKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("backend")))
	cookies := b.cookies()
	if len(cookies) != 1 || cookies[0].Name != sessionCookie || !cookies[0].HTTPOnly || cookies[0].SameSite != network.CookieSameSiteStrict || cookies[0].Path != pagePath {
		t.Errorf("session cookies: %+v", cookies)
	}
	if c := b.text("document.cookie"); c != "" {
		t.Errorf("a script reads the cookies %q", c)
	}

	// The menu: every backend with its type and host, the config's
	// default first selected.
	menu := eval[[]string](b, `Array.from(document.querySelectorAll('#backend option')).map(o => o.textContent)`)
	want := []string{"local (this machine)", "gpu-server (ssh to potato-test)", "cluster (slurm via login.cluster.example.org)",
		"lab-workstation (agent, last seen 2 min ago)"}
	if !slices.Equal(menu, want) {
		t.Errorf("Runs on menu %q, want %q", menu, want)
	}
	if sel := b.text("document.getElementById('backend').value"); sel != "gpu-server" {
		t.Errorf("selected backend %q, want gpu-server (model_training.backend)", sel)
	}

	// Check: the report of potato-check --json for the trainer the start
	// form selects, with its verdict.
	tr := b.text("document.getElementById('trainer').value")
	for _, name := range []string{"gpu-server", "local"} {
		out, _ := exec.Command(filepath.Join(b.e.bin, "potato-check"), "--json", "--trainer", tr, name, b.e.cfg).Output()
		var rep struct {
			OK      bool   `json:"ok"`
			Summary string `json:"summary"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("potato-check --json %s: %v\n%s", name, err, out)
		}
		verdict := "Not ready: "
		if rep.OK {
			verdict = "Ready: "
		}
		b.do("Check "+name, chromedp.SetValue(chromedp.ID("backend"), name), chromedp.Click(chromedp.ID("check")))
		b.waitJS("the check of "+name, `!document.getElementById('verdict').textContent.startsWith('Checking')`)
		if got := b.text("document.getElementById('verdict').textContent"); got != verdict+rep.Summary {
			t.Errorf("Check %s shows %q, want %q", name, got, verdict+rep.Summary)
		}
		var shown struct {
			Backend string `json:"backend"`
			Trainer string `json:"trainer"`
		}
		if err := json.Unmarshal([]byte(b.text("document.getElementById('report-json').textContent")), &shown); err != nil || shown.Backend != name || shown.Trainer != tr {
			t.Errorf("Check %s: the report shown is not potato-check's (%v)", name, err)
		}
	}

	// An error of the API is text on the page.
	b.do("choosing local", chromedp.SetValue(chromedp.ID("backend"), "local"))
	b.exec(`document.querySelectorAll('input[name=schemas]').forEach(i => i.checked = false)`)
	b.do("a start with no schema", chromedp.Click(chromedp.ID("start-run")))
	b.waitJS("the error", `!document.getElementById('error').hidden`)
	if msg := b.text("document.getElementById('error').textContent"); !strings.HasPrefix(msg, "no schema given") {
		t.Errorf("a start with no schema shows %q", msg)
	}

	// A local run from the form: the step line follows it, and it ends
	// in the table with its held-out score.
	b.exec(recordSteps)
	b.exec(`document.querySelector('input[value=sentiment]').checked = true`)
	b.do("starting a local run", chromedp.SetValue(chromedp.ID("trainer"), "tfidf-logreg"), chromedp.Click(chromedp.ID("start-run")))
	b.waitJS("the run in the table", newest+` !== ""`)
	local := b.text(newest)
	b.waitJS("run "+local+" to end", cellText(local, colState)+` === "success"`)
	info := b.e.info(local)
	if info.Heldout == nil || info.Trigger != "api" || info.Backend != "local" {
		t.Fatalf("run %s: finished %v %+v\n%s", local, info.Finished, info.Record, b.text("document.body.innerText"))
	}
	if got, want := b.text(cellText(local, colScore)), fmt.Sprintf("accuracy %.3f", info.Heldout.Accuracy); !strings.HasPrefix(got, want) {
		t.Errorf("held-out score %q, want %q...", got, want)
	}
	if got := b.text(cellText(local, colRanOn)); got != "local (this machine)" {
		t.Errorf("Ran on %q", got)
	}
	if b.text("document.getElementById('error').hidden ? '' : 'shown'") != "" {
		t.Errorf("the error stays after a good start: %s", b.text("document.getElementById('error').textContent"))
	}
	steps := eval[[]string](b, "window.steps")
	if len(steps) < 2 {
		t.Errorf("the step line of run %s showed %q: want it to change", local, steps)
	}

	// A run on the ssh backend: its steps name the host, and "Ran on"
	// says where.
	b.exec(recordSteps)
	b.do("starting an ssh run", chromedp.SetValue(chromedp.ID("backend"), "gpu-server"), chromedp.Click(chromedp.ID("start-run")))
	b.waitJS("the ssh run", newest+` !== "`+local+`"`)
	remote := b.text(newest)
	b.waitJS("the ssh run's step line", `window.steps.some(s => s.includes('potato-test'))`)
	b.waitJS("run "+remote+" to end", `["success", "error"].includes(`+cellText(remote, colState)+`)`)
	if st := b.text(cellText(remote, colState)); st != "success" {
		t.Fatalf("ssh run %s: %s\n%s", remote, st, b.e.detail(remote).Log)
	}
	if got := b.text(cellText(remote, colRanOn)); got != "gpu-server (ssh to potato-test)" {
		t.Errorf("Ran on %q", got)
	}
	steps = eval[[]string](b, "window.steps")
	if !slices.ContainsFunc(steps, func(s string) bool { return strings.HasPrefix(s, "copying Potato's code to potato-test") }) {
		t.Errorf("the ssh run's step lines %q lack the copy of the code", steps)
	}
	b.screenshot("training-page-done.png")

	// The run page: record, artifact location, log, events, write-back.
	b.do("the run page", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#runs tr[data-run=%q] a`, local))),
		chromedp.WaitVisible(chromedp.ID("record")))
	b.waitJS("the run's record", `document.getElementById('record').textContent.includes('Artifact location')`)
	page := b.text("document.body.innerText")
	for _, want := range []string{"Ran on\tlocal (this machine)", info.ArtifactURI, fmt.Sprintf("%d of %d predictions written as prelabels", info.Writeback["n_written"], info.Writeback["n_read"]),
		"sentiment/loss per step", "sentiment (nominal): "} {
		if !strings.Contains(page, want) {
			t.Errorf("the run page lacks %q:\n%s", want, page)
		}
	}
	// The raw events are there, behind their toggle (TestRunPageModel
	// opens it).
	if ev := b.text("document.getElementById('events').textContent"); !strings.Contains(ev, `"event":"result"`) {
		t.Errorf("the run page's events:\n%s", ev)
	}
	if log := b.text("document.getElementById('log').textContent"); !strings.Contains(log, "write-back") {
		t.Errorf("the run page's log:\n%s", log)
	}
	b.screenshot("run-page.png")
}

func TestPageCancel(t *testing.T) {
	b := newBrowser(t)
	b.do("signing in", chromedp.Navigate(b.url+pagePath+"/login"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SetValue(chromedp.ID("key"), testKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("backend")))

	// A long run, started on the server's command line: the page starts
	// only trainers known by name. It reports progress with an ETA, then,
	// once the test has seen it, the copy back of a model.
	dir := t.TempDir()
	next := filepath.Join(dir, "next")
	long := testproject.Trainer(b.t, dir, `echo '{"v":1,"event":"status","state":"running","step":"training: epoch 3 of 10"}'
echo '{"v":1,"event":"progress","phase":"fit","current":3,"total":10,"eta_s":65}'
while [ ! -e `+next+` ]; do sleep 0.1; done
echo '{"v":1,"event":"progress","phase":"fetch","current":125829120,"total":346030080}'
sleep 60
`+testproject.ResultLines)
	out, err := exec.Command(filepath.Join(b.e.bin, "potato-dispatch"), "run", b.e.cfg, "--trainer", long, "--schemas", "sentiment", "--backend", "local", "--detach").Output()
	if err != nil {
		t.Fatal(err)
	}
	longID := strings.TrimSpace(string(out))
	b.waitJS("the long run's step line", `document.getElementById('step').textContent === "training: epoch 3 of 10"`)
	if id := b.text("document.getElementById('current-id').textContent"); id != longID {
		t.Errorf("current run %q, want %s", id, longID)
	}
	b.waitJS("the progress", `document.getElementById('progress-text').textContent === "fit 30%, ETA 1 min 05 s"`)
	if v := eval[float64](b, "document.getElementById('progress').value"); v != 0.3 {
		t.Errorf("progress bar at %v, want 0.3", v)
	}
	if by := b.text(cellText(longID, colTrigger)); by != "manual" {
		t.Errorf("started by %q, want manual", by)
	}

	// A run started meanwhile waits its turn.
	b.do("starting a run", chromedp.SetValue(chromedp.ID("backend"), "local"), chromedp.Click(chromedp.ID("start-run")))
	b.waitJS("the queued run", newest+` !== "`+longID+`"`)
	queued := b.text(newest)
	b.waitJS("its place in the queue", cellText(queued, colState)+` === "queued (1st in queue)"`)
	if by := b.text(cellText(queued, colTrigger)); by != "api" {
		t.Errorf("started by %q, want api", by)
	}
	b.screenshot("training-page-running.png")

	if err := os.WriteFile(next, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the copy back", `document.getElementById('progress-text').textContent === "copying the model back: 120 MB of 330 MB"`)

	b.do("Cancel run", chromedp.Click(chromedp.ID("cancel")))
	b.waitJS("the long run to be cancelled", cellText(longID, colState)+` === "cancelled"`)
	// The page shows the state as the dispatch records it; the run's end
	// (finished) is recorded after, once its processes are gone.
	info := b.e.info(longID)
	for deadline := time.Now().Add(30 * time.Second); !info.Finished && time.Now().Before(deadline); info = b.e.info(longID) {
		time.Sleep(50 * time.Millisecond)
	}
	if info.State != rundir.StateCancelled || !info.Finished {
		t.Errorf("run %s: %s finished %v", longID, info.State, info.Finished)
	}
	// The queued run goes next and ends.
	b.waitJS("the queued run to end", cellText(queued, colState)+` === "success"`)
}

// The run page's Retract prelabels: the first click only asks, "Keep
// them" leaves everything as it was, and "Yes, retract them" empties the
// run's prediction rows; the page then says what was retracted and offers
// the button no more, and the run stays.
func TestPageRetract(t *testing.T) {
	b := newBrowser(t)
	b.do("signing in", chromedp.Navigate(b.url+pagePath+"/login"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SetValue(chromedp.ID("key"), testKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("backend")))
	id := b.e.dispatchRun(predictingTrainer, false)
	n := b.e.storeCount(runPreds, id)
	if n == 0 {
		t.Fatal("the run wrote no prelabels")
	}

	b.do("the run page", chromedp.Navigate(b.url+pagePath+"/runs/"+id), chromedp.WaitVisible(chromedp.ID("retract")))
	if !eval[bool](b, `document.getElementById('retract-confirm').hidden && document.getElementById('retracted').hidden`) {
		t.Error("the confirmation or a retraction is shown before the button is clicked")
	}
	b.do("Retract prelabels", chromedp.Click(chromedp.ID("retract")), chromedp.WaitVisible(chromedp.ID("retract-yes")))
	if !eval[bool](b, `document.getElementById('retract').hidden`) {
		t.Error("the button stays beside its confirmation")
	}
	if left := b.e.storeCount(runPreds, id); left != n {
		t.Fatalf("the first click deleted prelabels: %d of %d left", left, n)
	}
	b.do("Keep them", chromedp.Click(chromedp.ID("retract-no")), chromedp.WaitVisible(chromedp.ID("retract")))
	if left := b.e.storeCount(runPreds, id); left != n {
		t.Fatalf("Keep them deleted prelabels: %d of %d left", left, n)
	}

	b.do("Retract prelabels, confirmed", chromedp.Click(chromedp.ID("retract")), chromedp.WaitVisible(chromedp.ID("retract-yes")),
		chromedp.Click(chromedp.ID("retract-yes")), chromedp.WaitVisible(chromedp.ID("retracted")))
	if left := b.e.storeCount(runPreds, id); left != 0 {
		t.Errorf("%d prelabels left after the confirmed retraction", left)
	}
	if msg := b.text("document.getElementById('retracted').textContent"); !strings.HasPrefix(msg, "Retracted 20") ||
		!strings.Contains(msg, fmt.Sprintf(": %d prelabels deleted from Potato's store", n)) {
		t.Errorf("the page says %q after the retraction", msg)
	}
	b.waitJS("the button to go", `document.getElementById('retract-row').hidden`)
	if e := b.text("document.getElementById('error').hidden ? '' : document.getElementById('error').textContent"); e != "" {
		t.Errorf("the page shows an error: %s", e)
	}
	if info := b.e.info(id); info.State != rundir.StateSuccess || info.RetractedAt == nil || info.Writeback["n_retracted"] != n {
		t.Errorf("run.json after the retraction: state %s, retracted_at %v, writeback %v", info.State, info.RetractedAt, info.Writeback)
	}
	if rows := b.e.storeCount(`SELECT count(*) FROM training_runs WHERE run_id = ?`, id); rows != 1 {
		t.Errorf("training_runs has %d rows of the run, want it kept", rows)
	}
}
