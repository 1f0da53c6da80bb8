package main

import (
	"database/sql"
	"encoding/json"
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
// rises at every point, 0.72 at 25% to 0.88 at 100%, and still by 0.04
// over the last quarter, beyond the test split's noise: the report says
// more annotations will likely help, and estimates for each label how many
// more it needs. The run writes no prelabel and is no one's latest model.
func TestCurveRising(t *testing.T) {
	r := curveProject(t, "train: 0.1, val: 0.1, test: 0.8")
	info, report := runCurve(t, r, "--schemas", "spam", "--points", "25,50,75,100")
	s := schemaCurve(t, info, "spam")
	if s.NTrainSplit != 48 || s.NTest != 392 {
		t.Fatalf("train split %d, test split %d: want 48 and 392", s.NTrainSplit, s.NTest)
	}
	var items []int
	for i, p := range s.Points {
		items = append(items, p.NTrain)
		if i == 0 {
			if p.DMacroF1 != nil {
				t.Errorf("first point has a change: %v", *p.DMacroF1)
			}
			continue
		}
		if p.DMacroF1 == nil || *p.DMacroF1 <= 0 {
			t.Errorf("macro-F1 did not rise at %v%%: %+v", p.Percent, p)
		}
	}
	if !reflect.DeepEqual(items, []int{12, 24, 36, 48}) {
		t.Errorf("items per point %v, want 12 24 36 48", items)
	}
	first, last := s.Points[0], s.Points[len(s.Points)-1]
	if last.MacroF1-first.MacroF1 < 0.1 {
		t.Errorf("macro-F1 %.3f at 25%%, %.3f at 100%%: want a rise of at least 0.1", first.MacroF1, last.MacroF1)
	}
	if s.Verdict != curve.Rising || s.Change <= s.Noise {
		t.Errorf("verdict %s, change %.3f, noise %.3f: want rising beyond the noise", s.Verdict, s.Change, s.Noise)
	}
	want := "spam: macro-F1 still rose 0.04 over the last quarter of the train split (75% to 100%, 36 to 48 items); the test split's noise is ±0.03 on 392 items: more annotations of this kind will likely help"
	if s.Sentence != want || !strings.Contains(report, "\n"+want+"\n") {
		t.Errorf("sentence %q, want %q", s.Sentence, want)
	}
	for _, l := range s.Labels {
		if l.Verdict != curve.Rising || l.Estimate == nil || l.Estimate.More <= 0 || l.Estimate.B <= 0 {
			t.Errorf("label %s: %+v, want rising with an estimate", l.Label, l)
			continue
		}
		if !strings.Contains(l.Sentence, "an extrapolation") || !strings.Contains(report, "  "+l.Sentence+"\n") {
			t.Errorf("label %s: %q not in the report, or not said to be an extrapolation", l.Label, l.Sentence)
		}
	}
	if !strings.Contains(report, "  100%   48     0.875") {
		t.Errorf("the report has no row for 100%%:\n%s", report)
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
	if log := r.File(info.RunID, "run.log"); !strings.Contains(log, "a learning curve publishes no prelabels") || !strings.Contains(log, want) {
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

// TestCurveFlat: with a large train split (305 labelled emails) the spam
// schema is saturated, and so is signals, whose labels a rule derives
// from the text: macro-F1 moves within the test split's noise over the
// last half or more, and the report says more of the same will not help.
func TestCurveFlat(t *testing.T) {
	r := curveProject(t, "train: 0.6, val: 0.1, test: 0.3")
	info, report := runCurve(t, r, "--schemas", "spam,signals")
	for _, name := range []string{"spam", "signals"} {
		s := schemaCurve(t, info, name)
		if s.Verdict != curve.Flat || s.FlatFrom > 50 {
			t.Errorf("%s: verdict %s from %v%%: want flat over the last half at least\n%s", name, s.Verdict, s.FlatFrom, report)
		}
		if !strings.HasPrefix(s.Sentence, name+": macro-F1 flat over the last ") || !strings.HasSuffix(s.Sentence, ": more of the same will not") {
			t.Errorf("%s: sentence %q", name, s.Sentence)
		}
		first, last := s.Points[0], s.Points[len(s.Points)-1]
		if last.MacroF1 < 0.85 || last.MacroF1-first.MacroF1 > 0.06 {
			t.Errorf("%s: macro-F1 %.3f to %.3f: want a high, flat curve", name, first.MacroF1, last.MacroF1)
		}
	}
	want := []string{
		"spam: macro-F1 flat over the last three quarters of the train split (25% to 100%, 76 to 305 items), +0.02, within the test split's noise of ±0.03 on 143 items: more of the same will not",
		"signals: macro-F1 flat over the last half of the train split (50% to 100%, 124 to 247 items), +0.01, within the test split's noise of ±0.03 on 125 items: more of the same will not",
	}
	for _, w := range want {
		if !strings.Contains(report, "\n"+w+"\n") {
			t.Errorf("the report lacks %q", w)
		}
	}
}

// TestCurveRefused: a trainer without predictions, and points that are no
// curve, are refused before a run is recorded; a program that ignores
// spec.json's curve and writes one model's predictions fails with
// curve_incomplete instead of passing for a flat curve.
func TestCurveRefused(t *testing.T) {
	dir := t.TempDir()
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 40, 30, "")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trainer", "decision-calibrate", "--schemas", "sentiment"},
			"potato-dispatch: error: trainer decision-calibrate writes no predictions: it has no learning curve; the trainers that fit one are tfidf-logreg, hf-text-classification, or an exec: program that follows potato-events(5)\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "50,25"},
			"potato-dispatch: error: --points \"50,25\": points must rise: 25 after 50\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "100"},
			"potato-dispatch: error: --points \"100\": a curve has 2 to 20 points, not 1\n"},
		{[]string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--points", "0,50"},
			"potato-dispatch: error: --points \"0,50\": point 0 is outside (0, 100]: points are percentages of the train split\n"},
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
}

// TestCurveDetach: curve --detach prints the run id alone and returns;
// the curve run goes on in the background as a curve run, and --show
// prints its curve once wait has seen it end.
func TestCurveDetach(t *testing.T) {
	r := curveProject(t, "train: 0.1, val: 0.1, test: 0.8")
	code, out, errs := runDispatch(t, r, nil, "curve", r.Config, "--trainer", "tfidf-logreg", "--schemas", "spam", "--points", "50,100", "--detach")
	id := strings.TrimSpace(out)
	if code != 0 || !rundir.ValidID(id) {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out, errs)
	}
	if code, out, errs := runDispatch(t, r, nil, "wait", r.Config, id); code != 0 {
		t.Fatalf("wait: exit %d: %s%s", code, out, errs)
	}
	info := r.Info(id)
	if info.Curve == nil || !slices.Equal(info.Curve.Points, []float64{50, 100}) || len(info.Curve.Schemas) != 1 {
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
