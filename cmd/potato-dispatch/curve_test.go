package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/curve"
	"potato-training/lib/rundir"
)

// curveProject is the tests' real corpus, every email labelled, split as
// splits says.
func curveProject(t *testing.T, splits string) *testproject.Runs {
	t.Helper()
	dir := t.TempDir()
	emails := testproject.Emails(t, testcli.Root())
	return &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir,
		Config: testproject.WriteEmails(t, dir, emails, len(emails), "  splits: {"+splits+"}\n")}
}

// runCurve runs potato-dispatch curve and returns the run's record and the
// report; it fails the test unless the run succeeded.
func runCurve(t *testing.T, r *testproject.Runs, args ...string) (rundir.Info, string) {
	t.Helper()
	code, out, errs := runDispatch(t, r, nil, append([]string{"curve", r.Config, "--trainer", "tfidf-logreg"}, args...)...)
	if code != 0 {
		t.Fatalf("curve: exit %d\n%s\n%s", code, out, errs)
	}
	id, report, _ := strings.Cut(out, "\n")
	if !strings.Contains(errs, "potato-dispatch: a learning curve publishes no prelabels\n") {
		t.Errorf("stderr does not say the curve publishes no prelabels:\n%s", errs)
	}
	t.Logf("%s", report)
	info := r.Info(id)
	if info.Curve == nil || len(info.Curve.Schemas) == 0 {
		t.Fatalf("run.json has no scored curve: %+v", info.Curve)
	}
	return info, report
}

func schemaCurve(t *testing.T, info rundir.Info, name string) curve.Schema {
	t.Helper()
	for _, s := range info.Curve.Schemas {
		if s.Schema == name {
			return s
		}
	}
	t.Fatalf("no curve of %s in run.json", name)
	return curve.Schema{}
}

// TestCurveRising: on the real emails with a small train split (48
// labelled emails; 392 in the test split) the spam schema's macro-F1
// rises from 0.72 at 25% to 0.88 at 100%: over 8 nested draws a point,
// its trend per doubling of the training items is above 0 beyond both
// the test items' noise and the draws' spread, each reported, and the
// report says more annotations will likely help, and estimates for each
// label how many more it needs, with its interval. The run writes no
// prelabel and is no one's latest model.
func TestCurveRising(t *testing.T) {
	t.Parallel()
	r := curveProject(t, "train: 0.1, val: 0.1, test: 0.8")
	info, report := runCurve(t, r, "--schemas", "spam", "--points", "25,50,75,100")
	s := schemaCurve(t, info, "spam")
	if s.NTrainSplit != 48 || s.NTest != 392 || s.Draws != 8 || info.Curve.Draws != 8 || info.Curve.Epsilon != curve.Epsilon {
		t.Fatalf("train split %d, test split %d, %d draws of %d: want 48, 392, 8 of 8", s.NTrainSplit, s.NTest, s.Draws, info.Curve.Draws)
	}
	var items []int
	for i, p := range s.Points {
		items = append(items, p.NTrain)
		if len(p.Draws) != 8 {
			t.Fatalf("point %v%%: %d draws", p.Percent, len(p.Draws))
		}
		var sum float64
		for d, ds := range p.Draws {
			if ds.Draw != d {
				t.Errorf("point %v%%: draw %d is numbered %d", p.Percent, d, ds.Draw)
			}
			sum += ds.MacroF1
		}
		if math.Abs(sum/8-p.MacroF1) > 1e-9 || p.SETest <= 0 {
			t.Errorf("point %v%%: macro-F1 %v, the draws' mean %v, s.e. %v from the test items", p.Percent, p.MacroF1, sum/8, p.SETest)
		}
		if i == 0 {
			if p.DMacroF1 != nil || p.SEDraws <= 0 {
				t.Errorf("first point: change %v, s.e. %v from the draws", p.DMacroF1, p.SEDraws)
			}
		}
	}
	if !reflect.DeepEqual(items, []int{12, 24, 36, 48}) {
		t.Errorf("items per point %v, want 12 24 36 48", items)
	}
	first, last := s.Points[0], s.Points[len(s.Points)-1]
	if last.MacroF1-first.MacroF1 < 0.1 {
		t.Errorf("macro-F1 %.3f at 25%%, %.3f at 100%%: want a rise of at least 0.1", first.MacroF1, last.MacroF1)
	}
	tr := s.Trend
	if s.Verdict != curve.Rising || tr.Low <= 0 || tr.SETest <= 0 || tr.SEDraws <= 0 || tr.PerDoubling < 0.05 {
		t.Errorf("verdict %s, trend %+v: want rising beyond both parts of its error", s.Verdict, tr)
	}
	want := fmt.Sprintf("spam: macro-F1 rises %+.3f per doubling of the training items over 25%% to 100%% of the train split (12 to 48 items), 95%% interval %+.3f to %+.3f (s.e. %.3f from the 392 test items, %.3f from the 8 draws): more annotations of this kind will likely help",
		tr.PerDoubling, tr.Low, tr.High, tr.SETest, tr.SEDraws)
	if s.Sentence != want || !strings.Contains(report, "\n"+want+"\n") {
		t.Errorf("sentence %q, want %q", s.Sentence, want)
	}
	for _, l := range s.Labels {
		e := l.Estimate
		if l.Verdict != curve.Rising || e == nil || e.More <= 0 || e.B <= 0 || e.MoreLow < 1 || e.MoreLow > e.More || e.BLow >= e.B || e.BHigh <= e.B {
			t.Errorf("label %s: %+v, estimate %+v: want rising with an estimate and its interval", l.Label, l, e)
			continue
		}
		if !strings.Contains(l.Sentence, fmt.Sprintf("about %d more annotations of %s (95%% interval %d to ", e.More, l.Label, e.MoreLow)) ||
			!strings.Contains(l.Sentence, "an extrapolation") || !strings.Contains(report, "  "+l.Sentence+"\n") {
			t.Errorf("label %s: %q not in the report, or without its interval, or not said to be an extrapolation", l.Label, l.Sentence)
		}
	}
	if !strings.Contains(report, "spam (radio): 48 labelled items in the train split, 8 draws at each point, scored on 392 test items\n") ||
		!strings.Contains(report, "  POINT  ITEMS  ACCURACY  CHANGE  MACRO-F1  SE TEST  SE DRAWS  CHANGE  F1 SPAM (ITEMS)") ||
		!strings.Contains(report, fmt.Sprintf("\n  100%%   48     %.3f ", last.Accuracy)) {
		t.Errorf("the report lacks its header or its row for 100%%:\n%s", report)
	}

	// An analysis: nothing in Potato's store, no latest model.
	if info.Writeback != nil || info.Heldout != nil {
		t.Errorf("a curve run has writeback %v and heldout %v", info.Writeback, info.Heldout)
	}
	db, err := sql.Open("sqlite", filepath.Join(r.Dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM training_predictions WHERE run_id = ?`, info.RunID).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d prelabels of the curve run in Potato's store (%v)", n, err)
	}
	if log := r.File(info.RunID, "run.log"); !strings.Contains(log, "a learning curve publishes no prelabels") || !strings.Contains(log, want) ||
		strings.Contains(log, "curve draws asked for") {
		t.Errorf("run.log:\n%s", log)
	}
	if code, out, _ := runDispatch(t, r, nil, "latest", r.Config); code != 1 {
		t.Errorf("latest after a curve run: exit %d, %s", code, out)
	}

	// --show prints the same curve again, and --json is run.json's.
	code, out, errs := runDispatch(t, r, nil, "curve", r.Config, "--show", info.RunID, "--json")
	var got curve.Curve
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !reflect.DeepEqual(got, *info.Curve) {
		t.Errorf("--show --json: exit %d, %s%s", code, out, errs)
	}
	if code, out, _ := runDispatch(t, r, nil, "curve", r.Config, "--show", info.RunID); code != 0 || !strings.HasSuffix(report, strings.SplitN(out, "\n", 2)[1]) {
		t.Errorf("--show: exit %d:\n%s", code, out)
	}
}

// TestCurveFlat: a schema whose model has learnt what it can: the real
// emails and reviews side by side, each labelled with where it came from,
// 408 of them in the train split and 444 in the test split. From a
// quarter of the train split on, macro-F1 stays near 0.99: its trend's
// 90% interval is within ±0.02 per doubling, and the report says more of
// the same will not help.
func TestCurveFlat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir,
		Config: testproject.WriteSources(t, dir, testcli.Root(), "  splits: {train: 0.45, val: 0.05, test: 0.5}\n")}
	info, report := runCurve(t, r, "--schemas", "source")
	s := schemaCurve(t, info, "source")
	tr := s.Trend
	if s.Verdict != curve.Flat || tr.Low90 <= -curve.Epsilon || tr.High90 >= curve.Epsilon || s.NTest < 300 {
		t.Errorf("verdict %s, trend %+v on %d test items: want flat within ±%v\n%s", s.Verdict, tr, s.NTest, curve.Epsilon, report)
	}
	want := fmt.Sprintf("source: macro-F1 is flat over 25%% to 100%% of the train split (%d to %d items): %+.3f per doubling of the training items, 90%% interval %+.3f to %+.3f, within ±0.02 (s.e. %.3f from the %d test items, %.3f from the 8 draws): more of the same will not help",
		s.Points[0].NTrain, s.NTrainSplit, tr.PerDoubling, tr.Low90, tr.High90, tr.SETest, s.NTest, tr.SEDraws)
	if s.Sentence != want || !strings.Contains(report, "\n"+want+"\n") {
		t.Errorf("sentence %q, want %q", s.Sentence, want)
	}
	if first := s.Points[0]; first.MacroF1 < 0.95 {
		t.Errorf("macro-F1 %.3f at 25%%: want a high, flat curve", first.MacroF1)
	}
}

// TestCurveUnclear: the curves that the last step alone once called flat,
// on the real emails with 305 labelled in the train split: spam's
// macro-F1 rises from 0.93 to 0.95, too little for 143 test items to tell
// a rise from a flat curve, so it is unclear, and the sentence says how
// many test items would tell; signals rises by more than 0.02 per
// doubling, and is not called flat.
func TestCurveUnclear(t *testing.T) {
	t.Parallel()
	r := curveProject(t, "train: 0.6, val: 0.1, test: 0.3")
	info, report := runCurve(t, r, "--schemas", "spam,signals")
	spam := schemaCurve(t, info, "spam")
	if spam.Verdict != curve.Unclear || spam.NTestNeeded <= spam.NTest ||
		!strings.Contains(spam.Sentence, fmt.Sprintf(": it cannot tell a rise from a flat curve (within ±0.02); were it to stay at %+.3f, about %d labelled test items (it has 143)", spam.Trend.PerDoubling, spam.NTestNeeded)) ||
		!strings.HasSuffix(spam.Sentence, ": the curve cannot tell whether more annotations would help") {
		t.Errorf("spam: verdict %s, needs %d test items: %q\n%s", spam.Verdict, spam.NTestNeeded, spam.Sentence, report)
	}
	if sig := schemaCurve(t, info, "signals"); sig.Verdict == curve.Flat || sig.Trend.PerDoubling < curve.Epsilon {
		t.Errorf("signals: verdict %s, trend %+v: a rise of more than ±%v is not flat", sig.Verdict, sig.Trend, curve.Epsilon)
	}
	// status's table gives each schema's verdict.
	if code, out, _ := runDispatch(t, r, nil, "status", r.Config); code != 0 || !strings.Contains(out, "  curve unclear/") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}
}

// TestCurveRefused: a trainer without predictions, and points that are no
// curve, are refused before a run is recorded; a program that ignores
// spec.json's curve and writes one model's predictions fails with
// curve_incomplete instead of passing for a flat curve.
func TestCurveRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 40, 30, "")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trainer", "decision-calibrate", "--schemas", "sentiment"},
			"potato-dispatch: error: trainer decision-calibrate writes no predictions: it has no learning curve; the trainers that fit one are tfidf-logreg, hf-text-classification, embed-logreg, hf-span, or an exec: program that follows potato-events(5)\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "50,25"},
			"potato-dispatch: error: --points \"50,25\": points must rise: 25 after 50\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "100"},
			"potato-dispatch: error: --points \"100\": a curve has 2 to 20 points, not 1\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "0,50"},
			"potato-dispatch: error: --points \"0,50\": point 0 is outside (0, 100]: points are percentages of the train split\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--draws", "21"},
			"potato-dispatch: error: --draws 21: a curve has 1 to 20 draws, not 21\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--draws=-1"},
			"potato-dispatch: error: --draws -1: a curve has 1 to 20 draws, not -1\n"},
	} {
		code, out, errs := runDispatch(t, r, nil, append([]string{"curve", r.Config}, c.args...)...)
		if code != 2 || out != "" || errs != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errs, c.want)
		}
	}
	runs, _ := r.Root().List()
	if len(runs) != 0 {
		t.Errorf("%d runs recorded", len(runs))
	}

	ignores := testproject.Trainer(t, dir, `mkdir -p artifacts
echo '{"instance_id":"item-0","schema_name":"sentiment","payload":{"label":"positive"}}' > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl","n_predictions":1}'`)
	code, out, errs := runDispatch(t, r, nil, "curve", r.Config, "--trainer", ignores, "--schemas", "sentiment")
	id := strings.TrimSpace(out)
	if code != 1 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errs)
	}
	info := r.Info(id)
	if info.ErrorCode != "curve_incomplete" || !strings.HasPrefix(info.Error, "the trainer wrote no predictions for curve point 25% of schema sentiment: ") {
		t.Errorf("error %s: %s", info.ErrorCode, info.Error)
	}
	if info.Curve == nil || len(info.Curve.Schemas) != 0 {
		t.Errorf("curve %+v: want the points asked for and no schema scored", info.Curve)
	}

	// An exec: program gets 3 draws to fit in spec.json's curve_draws.
	// One that fits draw 1 at one point only fails the run; one that fits
	// draw 0 alone is judged on that draw, and the run log says so.
	lines := func(draw1 string) string {
		return `grep -Eq '"curve_draws": ?3' "$2" || exit 9
mkdir -p artifacts
for p in 50 100; do
  echo '{"instance_id":"item-0","schema_name":"sentiment","payload":{"label":"positive"},"curve_point":'$p'}' >> artifacts/predictions.jsonl
done
` + draw1 + `
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl","n_predictions":3}'`
	}
	partial := testproject.Trainer(t, t.TempDir(), lines(`echo '{"instance_id":"item-0","schema_name":"sentiment","payload":{"label":"positive"},"curve_point":50,"curve_draw":1}' >> artifacts/predictions.jsonl`))
	code, out, errs = runDispatch(t, r, nil, "curve", r.Config, "--trainer", partial, "--schemas", "sentiment", "--points", "50,100")
	id = strings.TrimSpace(out)
	if code != 1 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errs)
	}
	if info := r.Info(id); info.ErrorCode != "curve_incomplete" || info.Curve.Draws != 3 ||
		!strings.HasPrefix(info.Error, "the trainer wrote curve draw 1 of schema sentiment at 50% but not at 100%: ") {
		t.Errorf("error %s: %s", info.ErrorCode, info.Error)
	}
	one := testproject.Trainer(t, t.TempDir(), lines(""))
	code, out, errs = runDispatch(t, r, nil, "curve", r.Config, "--trainer", one, "--schemas", "sentiment", "--points", "50,100")
	id, _, _ = strings.Cut(out, "\n")
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errs)
	}
	if info := r.Info(id); len(info.Curve.Schemas) != 1 || info.Curve.Schemas[0].Draws != 1 ||
		!strings.Contains(r.File(id, "run.log"), "warning: sentiment: the trainer fitted 1 of the 3 curve draws asked for (spec.json curve_draws); the curve is judged on 1\n") {
		t.Errorf("curve %+v\nrun.log:\n%s", info.Curve, r.File(id, "run.log"))
	}
}

// TestCurveDetach: curve --detach prints the run id alone and returns;
// the curve run goes on in the background as a curve run, with the draws
// asked for, and --show prints its curve once wait has seen it end.
func TestCurveDetach(t *testing.T) {
	t.Parallel()
	r := curveProject(t, "train: 0.1, val: 0.1, test: 0.8")
	code, out, errs := runDispatch(t, r, nil, "curve", r.Config, "--trainer", "tfidf-logreg", "--schemas", "spam", "--points", "50,100", "--draws", "4", "--detach")
	id := strings.TrimSpace(out)
	if code != 0 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errs)
	}
	if code, out, errs := runDispatch(t, r, nil, "wait", r.Config, id); code != 0 {
		t.Fatalf("wait: exit %d: %s%s", code, out, errs)
	}
	info := r.Info(id)
	if info.Curve == nil || !slices.Equal(info.Curve.Points, []float64{50, 100}) || len(info.Curve.Schemas) != 1 ||
		info.Curve.Draws != 4 || info.Curve.Schemas[0].Draws != 4 {
		t.Fatalf("curve %+v", info.Curve)
	}
	code, out, _ = runDispatch(t, r, nil, "curve", r.Config, "--show", id)
	if code != 0 || !strings.Contains(out, "\n"+info.Curve.Schemas[0].Sentence+"\n") {
		t.Errorf("--show: exit %d:\n%s", code, out)
	}
	// status's detail names the points and says the sentence.
	if code, out, _ := runDispatch(t, r, nil, "status", r.Config, id); code != 0 ||
		!strings.Contains(out, "curve:       a learning curve at 50,100% of the train split; it publishes no prelabels\n") ||
		!strings.Contains(out, "curve:       "+info.Curve.Schemas[0].Sentence+"\n") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}
	// status's table says it is a curve, and its verdict, where a run's
	// held-out score goes.
	if code, out, _ := runDispatch(t, r, nil, "status", r.Config); code != 0 || !strings.Contains(out, "  curve "+info.Curve.Schemas[0].Verdict+"  ") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}
	// A run that is no curve's has none to show.
	if code, _, errs := runDispatch(t, r, nil, "curve", r.Config, "--show", "20261202T000000-000000"); code == 0 || errs == "" {
		t.Errorf("--show of no run: exit %d, %s", code, errs)
	}
}

// TestCurveOnAgent: a curve runs on an agent backend as any run does, the
// agent uploading only the predictions: every point is scored at home,
// and the run says where it ran.
func TestCurveOnAgent(t *testing.T) {
	t.Parallel()
	e := agentSetup(t, "      heartbeat_timeout_s: 30\n")
	code, out, errs := runDispatch(t, e.Runs, nil, "curve", e.Config, "--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "50,100", "--detach")
	id := strings.TrimSpace(out)
	if code != 0 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errs)
	}
	a := e.agent(e.token, "--once")
	info := e.wait(id)
	if info.State != rundir.StateSuccess || info.Curve == nil || len(info.Curve.Schemas) != 1 {
		t.Fatalf("state %s error %q curve %+v\n%s\nagent:\n%s", info.State, info.Error, info.Curve, e.dump(id), a.stderr.String())
	}
	s := info.Curve.Schemas[0]
	if info.RanOn != "lab (agent)" || len(s.Points) != 2 || s.Points[0].NTrain != curve.Size(s.NTrainSplit, 50) || s.NTest == 0 || s.Sentence == "" {
		t.Errorf("ran on %q, curve %+v", info.RanOn, s)
	}
	if info.Writeback != nil {
		t.Errorf("a curve run wrote back: %v", info.Writeback)
	}
}
