package server

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"potato-training/lib/curve"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// modelTrainer sends metric events, one name of them hostile markup, and
// predicts each test and val item's own label but every EVERY-th, which
// it flips, all at confidence 0.9, and "positive" for every unlabeled
// item.
const modelTrainer = `mkdir -p artifacts
set -- 1.2 0.6 0.4 0.3
for i in 1 2 3 4; do
  echo "{\"v\":1,\"event\":\"metric\",\"split\":\"train\",\"name\":\"sentiment/loss\",\"value\":$1,\"step\":$i}"
  shift
  echo "{\"v\":1,\"event\":\"metric\",\"split\":\"val\",\"name\":\"sentiment/loss\",\"value\":0.$((9 - i)),\"step\":$i}"
  echo "{\"v\":1,\"event\":\"metric\",\"split\":\"val\",\"name\":\"sentiment/accuracy\",\"value\":0.$((5 + i)),\"step\":$i}"
  echo "{\"v\":1,\"event\":\"metric\",\"split\":\"<b>val</b>\",\"name\":\"<img src=x onerror=window.pwned=1>\",\"value\":$i,\"step\":$i}"
  sleep 0.3
done
awk -v every=EVERY 'match($0, /"instance_id":"[^"]*"/) {
  id = substr($0, RSTART + 15, RLENGTH - 16)
  if (!match($0, /"sentiment":"[^"]*"/)) next
  l = substr($0, RSTART + 13, RLENGTH - 14); n++
  if (n % every == 0) l = (l == "positive" ? "negative" : "positive")
  printf "{\"instance_id\":\"%s\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"%s\",\"confidence\":0.9},\"confidence\":0.9}\n", id, l
}' bundle/test.jsonl bundle/val.jsonl > artifacts/predictions.jsonl
grep -o '"instance_id":"[^"]*"' bundle/unlabeled.jsonl | sed 's/.*:"//; s/"$//' | while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done >> artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`

// seriesOf reads the metric events a run's events kept (events.jsonl, or
// its archive), by
// split and name, as [step, value] pairs.
func seriesOf(t *testing.T, dir string) map[[2]string][][2]float64 {
	t.Helper()
	f, err := rundir.OpenEvents(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[[2]string][][2]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Event, Split, Name string
			Step, Value        float64
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == "metric" {
			k := [2]string{e.Split, e.Name}
			out[k] = append(out[k], [2]float64{e.Step, e.Value})
		}
	}
	return out
}

func labelSentences(ls []curve.Label) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Sentence)
	}
	return out
}

// affine reports whether ys = a + b*xs for one a and one b of the sign
// wanted, to a hundredth of a pixel.
func affine(xs, ys []float64, sign float64) bool {
	if len(xs) < 2 {
		return len(xs) == len(ys)
	}
	lo, hi := 0, 0
	for i := range xs {
		if xs[i] < xs[lo] {
			lo = i
		}
		if xs[i] > xs[hi] {
			hi = i
		}
	}
	if xs[hi] == xs[lo] {
		return false
	}
	b := (ys[hi] - ys[lo]) / (xs[hi] - xs[lo])
	if b*sign <= 0 {
		return false
	}
	for i := range xs {
		if math.Abs(ys[lo]+b*(xs[i]-xs[lo])-ys[i]) > 0.01 {
			return false
		}
	}
	return true
}

// TestRunPageModel: a run's page draws its own metric events, its
// held-out figures per label and confusion matrix from run.json, the
// gate's decision, and a curve run's curve; the Training page shows the
// acceptance report. Every name a trainer or an annotator chose stays
// text.
func TestRunPageModel(t *testing.T) {
	b := newBrowser(t)
	b.do("signing in", chromedp.Navigate(b.url+pagePath+"/login"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SetValue(chromedp.ID("key"), testKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("backend")))
	// Under if_better: the first run publishes, a worse one does not.
	text, err := os.ReadFile(b.e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.e.cfg, []byte(strings.Replace(string(text), "    min_confidence: 0.5\n", "    min_confidence: 0.5\n    promote: if_better\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	good := b.e.dispatchRun(strings.Replace(modelTrainer, "EVERY", "4", 1), false)
	worse := b.e.dispatchRun(strings.Replace(modelTrainer, "EVERY", "1", 1), false)
	if info := b.e.info(good); info.State != rundir.StateSuccess {
		t.Fatalf("run %s: %s %s\n%s", good, info.State, info.Error, strings.Join(b.e.detail(good).Log, "\n"))
	}
	wi := b.e.info(worse)
	if p, ok := wi.Promotion["sentiment"]; !ok || p.Published || !strings.HasPrefix(p.Reason, "not published: macro-F1 0.00 < ") {
		t.Fatalf("run %s, trained to be wrong: promotion %+v", worse, wi.Promotion)
	}

	// The good run's page: one chart a metric name, one line a split,
	// each line's points those of the events events.jsonl kept, x by
	// step and y by value.
	b.do("the run page", chromedp.Navigate(b.url+pagePath+"/runs/"+good), chromedp.WaitVisible(chromedp.ID("record")))
	b.waitJS("the charts", `document.querySelectorAll('#charts polyline').length > 0 && document.querySelectorAll('#scores table').length > 0`)
	kept := seriesOf(t, b.e.s.Root.RunDir(good))
	var lines []struct {
		Split, Name, Points string
	}
	if err := json.Unmarshal([]byte(b.text(`JSON.stringify(Array.from(document.querySelectorAll('#charts polyline')).map(p =>
		({split: p.dataset.split, name: p.dataset.name, points: p.getAttribute('points')})))`)), &lines); err != nil {
		t.Fatal(err)
	}
	if len(lines) != len(kept) || len(kept) != 4 {
		t.Errorf("%d lines drawn, %d series in events.jsonl; want 4 of each", len(lines), len(kept))
	}
	for _, l := range lines {
		ev := kept[[2]string{l.Split, l.Name}]
		var steps, values, xs, ys []float64
		for _, e := range ev {
			steps, values = append(steps, e[0]), append(values, e[1])
		}
		for _, p := range strings.Fields(l.Points) {
			x, y, _ := strings.Cut(p, ",")
			fx, _ := strconv.ParseFloat(x, 64)
			fy, _ := strconv.ParseFloat(y, 64)
			xs, ys = append(xs, fx), append(ys, fy)
		}
		if len(ev) < 2 || len(xs) != len(ev) || !affine(steps, xs, 1) || !affine(values, ys, -1) {
			t.Errorf("line %q of %q: points %q are not the events' %v", l.Split, l.Name, l.Points, ev)
		}
	}
	// The reliability diagram. The val split's 16 answers are too few to
	// calibrate on: the diagram draws the test split's bins as trained,
	// beside the diagonal, and says why there is no other line.
	cal, ok := b.e.info(good).Calibration["sentiment"]
	if !ok || cal.Method != rundir.CalibrationNone || cal.ECEBefore == nil || len(cal.Before) == 0 {
		t.Fatalf("run.json's calibration: %+v", b.e.info(good).Calibration)
	}
	diagram := func(bins map[string][]rundir.ReliabilityBin, says string) {
		t.Helper()
		b.waitJS("the reliability diagram", `document.querySelector('#calibration polyline[data-series="before"]') !== null && document.getElementById('calibration').innerText.includes(`+strconv.Quote(says)+`)`)
		for _, series := range []string{"before", "after"} {
			got := eval[[]string](b, `Array.from(document.querySelectorAll('#calibration polyline[data-schema="sentiment"][data-series="`+series+`"]')).map(p => p.getAttribute('points'))`)
			if len(bins[series]) == 0 {
				if len(got) != 0 {
					t.Errorf("%s: drawn without bins", series)
				}
				continue
			}
			if len(got) != 1 || len(strings.Fields(got[0])) != len(bins[series]) {
				t.Errorf("%s: drawn %q, %d bins in run.json", series, got, len(bins[series]))
			}
		}
		if got := b.text("document.getElementById('calibration').innerText"); !strings.Contains(got, "perfect calibration") {
			t.Errorf("the calibration section says:\n%s", got)
		}
	}
	diagram(map[string][]rundir.ReliabilityBin{"before": cal.Before}, "Not calibrated: 16 val items")
	// A calibrated run's record draws both.
	after := 0.02
	cal.Method, cal.Temperature, cal.ECEAfter, cal.Reason = rundir.CalibrationTopLabelTemperature, 1.8, &after, ""
	cal.After = []rundir.ReliabilityBin{{Lo: 0.7, Hi: 0.8, Confidence: 0.76, Accuracy: 0.7647, N: 17}}
	if err := b.e.s.Root.Edit(good, func(rec *rundir.Record, _ bool) error {
		rec.Calibration = map[string]rundir.Calibration{"sentiment": cal}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.do("the run page again", chromedp.Navigate(b.url+pagePath+"/runs/"+good), chromedp.WaitVisible(chromedp.ID("record")))
	diagram(map[string][]rundir.ReliabilityBin{"before": cal.Before, "after": cal.After}, "Calibrated by top label temperature 1.8")
	noScript := func(where string) {
		t.Helper()
		if eval[bool](b, `window.pwned !== undefined || document.querySelectorAll('main img, main b').length > 0`) {
			t.Errorf("%s: a name from a trainer or an annotator became markup", where)
		}
	}
	noScript("the run page")
	charts := b.text("document.getElementById('charts').innerText")
	for _, want := range []string{"sentiment/loss per step", "sentiment/accuracy per step", "<img src=x onerror=window.pwned=1> per step", "<b>val</b>: last 4 (4 points)"} {
		if !strings.Contains(charts, want) {
			t.Errorf("the charts lack %q:\n%s", want, charts)
		}
	}

	// The held-out figures: each label's row and the confusion matrix as
	// run.json keeps them.
	var held map[string]writeback.SchemaScore
	raw, _ := json.Marshal(b.e.info(good).Metrics["heldout"])
	if err := json.Unmarshal(raw, &held); err != nil || held["sentiment"].Confusion == nil {
		t.Fatalf("run.json's heldout: %s (%v)", raw, err)
	}
	sc := held["sentiment"]
	rows := eval[[][]string](b, `Array.from(document.querySelectorAll('#scores table.labels tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))`)
	if len(rows) != len(sc.Labels) {
		t.Fatalf("label rows %q, want %d", rows, len(sc.Labels))
	}
	for i, l := range sc.Labels {
		want := []string{l.Label, strconv.Itoa(l.Support), fmt.Sprintf("%.3f", l.Precision), fmt.Sprintf("%.3f", l.Recall), fmt.Sprintf("%.3f", l.F1),
			strconv.Itoa(l.TP), strconv.Itoa(l.FP), strconv.Itoa(l.FN), strconv.Itoa(l.TN)}
		if strings.Join(rows[i], "|") != strings.Join(want, "|") {
			t.Errorf("label row %q, want %q", rows[i], want)
		}
	}
	if sc.Labels[0].FN+sc.Labels[0].FP == 0 {
		t.Errorf("the flipped items made no error: %+v", sc.Labels)
	}
	cells := eval[[][]string](b, `Array.from(document.querySelectorAll('#scores table.confusion tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))`)
	for i, g := range sc.Confusion.Labels {
		want := []string{g}
		for _, n := range sc.Confusion.Counts[i] {
			want = append(want, strconv.Itoa(n))
		}
		want = append(want, strconv.Itoa(sc.Confusion.NoLabel[i]))
		if i >= len(cells) || strings.Join(cells[i], "|") != strings.Join(want, "|") {
			t.Errorf("confusion row %d %q, want %q", i, cells, want)
		}
	}

	// The raw events, behind a toggle.
	if eval[bool](b, `document.getElementById('events-toggle').open || document.getElementById('events').checkVisibility()`) {
		t.Error("the raw events are shown before the toggle is opened")
	}
	b.do("the raw events", chromedp.Click(chromedp.CSS("#events-toggle summary")))
	b.waitJS("the raw events shown", `document.getElementById('events').checkVisibility()`)
	if ev := b.text("document.getElementById('events').textContent"); !strings.Contains(ev, `"event":"result"`) {
		t.Errorf("the raw events: %s", ev)
	}

	// The worse run: the gate's sentence on its page and in the runs list.
	reason := wi.Promotion["sentiment"].Reason
	b.do("the worse run's page", chromedp.Navigate(b.url+pagePath+"/runs/"+worse), chromedp.WaitVisible(chromedp.ID("promotion")))
	if got := b.text("document.getElementById('promotion').textContent"); got != "sentiment: "+reason {
		t.Errorf("the worse run's page says %q, want %q", got, "sentiment: "+reason)
	}
	b.do("the Training page", chromedp.Navigate(b.url+pagePath), chromedp.WaitVisible(chromedp.ID("backend")))
	b.waitJS("the runs", cellText(worse, colScore)+` !== ""`)
	if got := b.text(`document.querySelector('#runs tr[data-run="` + worse + `"] .not-published').textContent`); got != reason {
		t.Errorf("the runs list says %q of run %s, want %q", got, worse, reason)
	}
	if eval[bool](b, `!!document.querySelector('#runs tr[data-run="`+good+`"] .not-published')`) {
		t.Errorf("the runs list says the published run %s was not published", good)
	}

	// Acceptance: after the good run published "positive" on every
	// unlabeled item, maria labels 15 of them "negative": the label is
	// flagged. Then an annotator whose name is markup accepts the other 5.
	annotate := func(dir, name, label string, from, to int) {
		state := map[string]any{}
		for i := from; i <= to; i++ {
			state[fmt.Sprintf("r%d", i)] = []any{[]any{map[string]string{"schema": "sentiment", "name": label}, "true"}}
		}
		adir := filepath.Join(filepath.Dir(b.e.cfg), "annotation_output", dir)
		if err := os.MkdirAll(adir, 0o755); err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(map[string]any{"user_id": name, "instance_id_to_label_to_value": state})
		if err := os.WriteFile(filepath.Join(adir, "user_state.json"), js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// panelShows refreshes the panel and checks it against GET /report.
	panelShows := func(accepted, n int, more ...string) {
		t.Helper()
		var rep struct {
			Schemas []struct {
				All struct{ N, Accepted int }
			}
			Flags []struct{ Kind, Name string }
		}
		b.e.do("GET", "/report", "").decode(t, &rep)
		if len(rep.Schemas) != 1 || rep.Schemas[0].All.N != n || rep.Schemas[0].All.Accepted != accepted || len(rep.Flags) != 1 {
			t.Fatalf("GET /report: %+v, want %d of %d accepted and one flag", rep, accepted, n)
		}
		share := fmt.Sprintf("%d of %d labels equal to the prelabel", accepted, n)
		// The status names the report's time: a new one is the new report.
		before := b.text("document.getElementById('acceptance-status').textContent")
		b.do("Refresh", chromedp.Click(chromedp.ID("acceptance-refresh")))
		b.waitJS("the acceptance report", `document.getElementById('acceptance-status').textContent !== `+strconv.Quote(before)+
			` && document.getElementById('acceptance').innerText.includes(`+strconv.Quote(share)+`)`)
		panel := b.text("document.getElementById('acceptance').innerText")
		for _, want := range append([]string{fmt.Sprintf("sentiment (nominal): run %s", good),
			fmt.Sprintf("flag: label positive in sentiment: %d of %d accepted", accepted, n)}, more...) {
			if !strings.Contains(panel, want) {
				t.Errorf("the acceptance panel lacks %q:\n%s", want, panel)
			}
		}
	}
	annotate("maria", "maria", "negative", 101, 115)
	panelShows(0, 15, "maria\t15\t0\t0.000", "0 of 15 agreed (0.000), a careful annotator ", ": no more often than expected")
	b.screenshot("training-page-acceptance.png")
	name := `<img src=x onerror=window.pwned=2>`
	annotate("hostile", name, "positive", 116, 120)
	panelShows(5, 20, name+"\t5\t5\t1.000", "5 of 5 agreed (1.000), a careful annotator ")
	noScript("the acceptance panel")

	// Reviewers' verdicts, as Potato's model review stores them (its
	// migration 0001_model_review_verdicts): the panel shows the run's
	// precision as they judged it, beside the acceptance figures, and the
	// rule. A reviewer whose name is markup stays text.
	panelShows(5, 20, "Reviewers' verdicts (Potato's model review): none on this run's prelabels.")
	db, err := sql.Open("sqlite", filepath.Join(filepath.Dir(b.e.cfg), "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS model_review_verdicts (
		project TEXT NOT NULL, instance_id TEXT NOT NULL, schema_name TEXT NOT NULL DEFAULT '',
		reviewer TEXT NOT NULL, verdict TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL,
		PRIMARY KEY (project, instance_id, schema_name, reviewer))`); err != nil {
		t.Fatal(err)
	}
	var project string
	if err := db.QueryRow(`SELECT project FROM training_runs WHERE run_id = ?`, good).Scan(&project); err != nil {
		t.Fatal(err)
	}
	later := float64(time.Now().Add(time.Minute).UnixNano()) / 1e9
	for i, v := range []string{"accept", "accept", "accept", "correct", "reject"} {
		if _, err := db.Exec(`INSERT INTO model_review_verdicts VALUES (?, ?, 'sentiment', ?, ?, '', ?)`,
			project, fmt.Sprintf("r%d", 101+i), `<img src=x onerror=window.pwned=3>`, v, later); err != nil {
			t.Fatal(err)
		}
	}
	var rv struct {
		ReviewRule string `json:"review_rule"`
		Schemas    []struct {
			Review struct {
				All struct{ N, Accept int }
			}
		}
	}
	b.e.do("GET", "/report", "").decode(t, &rv)
	if len(rv.Schemas) != 1 || rv.Schemas[0].Review.All.N != 5 || rv.Schemas[0].Review.All.Accept != 3 || rv.ReviewRule == "" {
		t.Fatalf("GET /report: %+v, want 3 of 5 verdicts accept and the rule", rv)
	}
	panelShows(5, 20, "Reviewers' verdicts (Potato's model review): 5 by 1 reviewer, 3 accept, 1 correct, 1 reject: precision 0.600 (95% CI 0.23\u20130.88).",
		"positive\t5\t3\t1\t1\t0.600\t0.23\u20130.88")
	if got := b.text("document.getElementById('acceptance-review').textContent"); got != rv.ReviewRule {
		t.Errorf("the panel's rule for verdicts is %q, want the report's %q", got, rv.ReviewRule)
	}
	noScript("the acceptance panel's verdicts")

	// A curve run: its page draws run.json's curve, one point a share.
	out, err := exec.Command(filepath.Join(b.e.bin, "potato-dispatch"), "curve", b.e.cfg, "--trainer", "tfidf-logreg", "--schemas", "sentiment", "--backend", "local", "--detach").Output()
	cid := strings.TrimSpace(string(out))
	if err != nil || !rundir.ValidID(cid) {
		t.Fatalf("potato-dispatch curve: %v %q", err, out)
	}
	b.e.waitState(cid, rundir.StateSuccess)
	ci := b.e.info(cid)
	if ci.Curve == nil || len(ci.Curve.Schemas) != 1 {
		t.Fatalf("curve run %s: %+v", cid, ci.Curve)
	}
	cs := ci.Curve.Schemas[0]
	b.do("the curve run's page", chromedp.Navigate(b.url+pagePath+"/runs/"+cid), chromedp.WaitVisible(chromedp.ID("learning-curve")))
	b.waitJS("the curve", `document.querySelector('#learning-curve polyline')`)
	pts := strings.Fields(b.text(`document.querySelector('#learning-curve polyline[data-schema="sentiment"][data-metric="macro_f1"]').getAttribute('points')`))
	var pct, f1, xs, ys []float64
	for i, p := range cs.Points {
		pct, f1 = append(pct, p.Percent), append(f1, p.MacroF1)
		if i < len(pts) {
			x, y, _ := strings.Cut(pts[i], ",")
			fx, _ := strconv.ParseFloat(x, 64)
			fy, _ := strconv.ParseFloat(y, 64)
			xs, ys = append(xs, fx), append(ys, fy)
		}
	}
	// Drawn on [0, 1]: each y is where its macro-F1 falls between the
	// grid lines of 0 and 1, even where two points tie.
	grid := eval[[]float64](b, `Array.from(document.querySelectorAll('#learning-curve line.grid')).map(l => Number(l.getAttribute('y1')))`)
	onScale := len(grid) > 1
	for i := range ys {
		if onScale && math.Abs(grid[0]+f1[i]*(grid[len(grid)-1]-grid[0])-ys[i]) > 0.01 {
			onScale = false
		}
	}
	if len(pts) != len(cs.Points) || !affine(pct, xs, 1) || !onScale {
		t.Errorf("the curve's points %q are not run.json's %+v", pts, cs.Points)
	}
	got := b.text("document.getElementById('learning-curve').innerText")
	for _, want := range append([]string{cs.Sentence}, labelSentences(cs.Labels)...) {
		if !strings.Contains(got, want) {
			t.Errorf("the curve's page lacks the sentence %q:\n%s", want, got)
		}
	}
	// Each label's F1, a line of its own, one point a share.
	for _, l := range cs.Points[0].Labels {
		lp := strings.Fields(b.text(`document.querySelector('#learning-curve polyline[data-label=` + strconv.Quote(l.Label) + `]').getAttribute('points')`))
		var lf, lys []float64
		for i, p := range cs.Points {
			for _, pl := range p.Labels {
				if pl.Label == l.Label {
					lf = append(lf, pl.F1)
				}
			}
			if i < len(lp) {
				_, y, _ := strings.Cut(lp[i], ",")
				fy, _ := strconv.ParseFloat(y, 64)
				lys = append(lys, fy)
			}
		}
		for i := range lys {
			if len(lys) != len(lf) || math.Abs(grid[0]+lf[i]*(grid[len(grid)-1]-grid[0])-lys[i]) > 0.01 {
				t.Errorf("label %s: points %q, F1 %v", l.Label, lp, lf)
				break
			}
		}
	}
	b.screenshot("run-page-curve.png")
}
