package main

// potato-dispatch report reads the verdicts of Potato's model review
// (assignment_strategy: model_review) from the model_review_verdicts
// table that Potato makes in the store, and says each run's precision as
// reviewers judged it. Two real runs on real emails, the second replacing
// the first's prelabels; the table is made with Potato 2.12.1's own
// migration and filled as its POST /api/model-review/verdict fills it (one
// row per item, schema and reviewer). TestReleasedPotatoModelReview does
// the same through the released Potato's routes.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/writeback"
)

// potatoVerdictsSQL is Potato 2.12.1's migration
// 0001_model_review_verdicts (potato/model_review.py), as it runs it.
const potatoVerdictsSQL = `
CREATE TABLE IF NOT EXISTS model_review_verdicts (
    project     TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    schema_name TEXT NOT NULL DEFAULT '',
    reviewer    TEXT NOT NULL,
    verdict     TEXT NOT NULL,
    note        TEXT NOT NULL DEFAULT '',
    updated_at  REAL NOT NULL,
    PRIMARY KEY (project, instance_id, schema_name, reviewer)
);
CREATE INDEX IF NOT EXISTS idx_review_project
    ON model_review_verdicts (project, updated_at DESC);`

type reviewCountJSON struct {
	Name      string  `json:"name"`
	N         int     `json:"n"`
	Accept    int     `json:"accept"`
	Correct   int     `json:"correct"`
	Reject    int     `json:"reject"`
	Precision float64 `json:"precision"`
	Low       float64 `json:"ci95_low"`
	High      float64 `json:"ci95_high"`
}

type reviewJSON struct {
	All       reviewCountJSON   `json:"all"`
	Reviewers int               `json:"reviewers"`
	NReplaced int               `json:"n_replaced"`
	Labels    []reviewCountJSON `json:"labels"`
}

type reviewReportJSON struct {
	ReviewRule string `json:"review_rule"`
	Verdicts   struct {
		N         int `json:"n"`
		Counted   int `json:"counted"`
		OtherRuns []struct {
			Schema string `json:"schema"`
			RunID  string `json:"run_id"`
			N      int    `json:"n"`
		} `json:"other_runs"`
		NoSchema       int `json:"n_no_schema"`
		OtherSchema    int `json:"n_other_schema"`
		NoRun          int `json:"n_no_run"`
		UnknownVerdict int `json:"n_unknown_verdict"`
	} `json:"verdicts"`
	Schemas []struct {
		Schema string      `json:"schema"`
		RunID  string      `json:"run_id"`
		Review *reviewJSON `json:"review"`
	} `json:"schemas"`
	Notes []string `json:"notes"`
}

// wilson95 is the Wilson score interval at 95%, computed here apart from
// the report's own.
func wilson95(k, n int) (float64, float64) {
	z := 1.959963984540054
	p, m := float64(k)/float64(n), float64(n)
	c := (p + z*z/(2*m)) / (1 + z*z/m)
	h := z / (1 + z*z/m) * math.Sqrt(p*(1-p)/m+z*z/(4*m*m))
	return math.Max(0, c-h), math.Min(1, c+h)
}

// expected counts verdicts as the report must: in all and by label.
type expected struct {
	all       reviewCountJSON
	labels    map[string]*reviewCountJSON
	reviewers map[string]bool
}

func (e *expected) add(reviewer, verdict string, labels []string) {
	if e.labels == nil {
		e.labels, e.reviewers = map[string]*reviewCountJSON{}, map[string]bool{}
	}
	e.reviewers[reviewer] = true
	inc := func(c *reviewCountJSON) {
		c.N++
		switch verdict {
		case "accept":
			c.Accept++
		case "correct":
			c.Correct++
		default:
			c.Reject++
		}
	}
	inc(&e.all)
	if len(labels) == 0 {
		labels = []string{"(none)"}
	}
	for _, l := range labels {
		if e.labels[l] == nil {
			e.labels[l] = &reviewCountJSON{Name: l}
		}
		inc(e.labels[l])
	}
}

// check compares a review of the report with e: the counts, the
// precision, its interval, by label.
func (e *expected) check(t *testing.T, what string, got *reviewJSON) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: no review in the report", what)
	}
	same := func(w, g reviewCountJSON) {
		t.Helper()
		lo, hi := wilson95(w.Accept, w.N)
		if g.N != w.N || g.Accept != w.Accept || g.Correct != w.Correct || g.Reject != w.Reject ||
			math.Abs(g.Precision-float64(w.Accept)/float64(w.N)) > 1e-12 || math.Abs(g.Low-lo) > 1e-9 || math.Abs(g.High-hi) > 1e-9 {
			t.Errorf("%s %s: the report has %+v, want %d verdicts, %d accept, %d correct, %d reject, precision %.4f in %.4f-%.4f",
				what, w.Name, g, w.N, w.Accept, w.Correct, w.Reject, float64(w.Accept)/float64(w.N), lo, hi)
		}
	}
	same(e.all, got.All)
	if got.Reviewers != len(e.reviewers) {
		t.Errorf("%s: %d reviewers, want %d", what, got.Reviewers, len(e.reviewers))
	}
	var names []string
	for _, l := range got.Labels {
		names = append(names, l.Name)
		w, ok := e.labels[l.Name]
		if !ok {
			t.Errorf("%s: the report has label %q, which no verdict's prelabel has", what, l.Name)
			continue
		}
		same(*w, l)
	}
	if len(names) != len(e.labels) {
		t.Errorf("%s: labels %q, want %d of them", what, names, len(e.labels))
	}
}

// TestReportReviewVerdicts: reviewers judge the first run's prelabels,
// a second run replaces them, and reviewers judge the second run's. The
// report of the published (second) run counts only the verdicts given
// after it published, among them those of a reviewer who judged the same
// item again (Potato keeps their latest); the first run's verdicts stay
// with it (report --run), counted as on prelabels it no longer holds. A
// verdict older than any published prelabel, one without a schema and
// one Potato would refuse (neither accept, correct nor reject) count for
// no run, and the report says so.
func TestReportReviewVerdicts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// promote: always (the writeback block ends the config): the second
	// run, trained on the same labels, replaces the first; 240 labelled
	// emails give a val split large enough that the check against the
	// most common label lets the spam model through.
	cfg := testproject.WriteEmails(t, dir, testproject.Emails(t, testcli.Root())[:400], 240,
		"    promote: always\n")
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: cfg}
	writebackBoth(t, cfg)

	db := sqlDB(t, dir)
	prelabels := func(run, schema string) map[string][]string {
		t.Helper()
		rows, err := db.Query(`SELECT instance_id, payload FROM training_predictions WHERE run_id = ? AND schema_name = ? ORDER BY instance_id`, run, schema)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string][]string{}
		for rows.Next() {
			var id, payload string
			if err := rows.Scan(&id, &payload); err != nil {
				t.Fatal(err)
			}
			out[id] = storedNames(t, payload)
		}
		return out
	}
	run := func() string {
		t.Helper()
		res := r.Run("--trainer", "tfidf-logreg", "--schemas", "spam,signals")
		if res.Code != 0 {
			t.Fatalf("run: exit %d: %s", res.Code, res.Stderr)
		}
		return res.ID
	}
	first := run()
	firstSpam := prelabels(first, "spam")
	second := run()
	secondSpam, secondSignals := prelabels(second, "spam"), prelabels(second, "signals")
	if len(prelabels(first, "spam")) != 0 || len(secondSpam) < 40 || len(secondSignals) < 10 {
		t.Fatalf("the second run holds %d spam and %d signals prelabels, the first %d; want the second to replace the first",
			len(secondSpam), len(secondSignals), len(prelabels(first, "spam")))
	}
	unix := func(at time.Time) float64 { return float64(at.UnixNano()) / 1e9 }
	i1, i2 := r.Info(first), r.Info(second)
	// Between the two runs' publications, and after the second's.
	between, after := unix(i2.CreatedAt), unix(*i2.FinishedAt)+1
	if between <= unix(*i1.FinishedAt) {
		t.Fatalf("the second run was created at %v, before the first ended at %v", i2.CreatedAt, i1.FinishedAt)
	}

	// A store whose table Potato has not made (no review read or given
	// yet) has no verdict, and its report says none.
	s, err := writeback.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := s.Verdicts("Spam")
	s.Close()
	if err != nil || len(vs) != 0 {
		t.Fatalf("before Potato made its table: %d verdicts (%v)", len(vs), err)
	}
	code, out, errb := testproject.Exec(t, r.Command("potato-dispatch", "report", cfg))
	if code != 0 || strings.Count(out, "reviewers' verdicts (Potato's model review): none on this run's prelabels") != 2 {
		t.Fatalf("report before any verdict: exit %d, %s%s; want no verdict in either schema", code, out, errb)
	}

	if _, err := db.Exec(potatoVerdictsSQL); err != nil {
		t.Fatal(err)
	}
	verdict := func(item, schema, reviewer, v string, at float64) {
		t.Helper()
		// Potato's record_verdict: one row per item, schema and reviewer.
		if _, err := db.Exec(`INSERT INTO model_review_verdicts (project, instance_id, schema_name, reviewer, verdict, note, updated_at)
			VALUES (?, ?, ?, ?, ?, '', ?) ON CONFLICT (project, instance_id, schema_name, reviewer)
			DO UPDATE SET verdict = excluded.verdict, note = excluded.note, updated_at = excluded.updated_at`,
			"Spam", item, schema, reviewer, v, at); err != nil {
			t.Fatal(err)
		}
	}
	pattern := []string{"accept", "accept", "correct", "reject", "accept"}
	var wantFirst, wantSecond, wantSignals expected
	items := slices.Sorted(func(yield func(string) bool) {
		for id := range firstSpam {
			if _, ok := secondSpam[id]; ok && !yield(id) {
				return
			}
		}
	})
	// rev1 judges 20 of the first run's spam prelabels, then, after the
	// second run, 5 of the same items again: those 5 now count for the
	// second run only.
	for i, id := range items[:20] {
		verdict(id, "spam", "rev1", pattern[i%len(pattern)], between+float64(i)*1e-3)
		if i >= 5 {
			wantFirst.add("rev1", pattern[i%len(pattern)], firstSpam[id])
		}
	}
	for i, id := range items[:5] {
		v := pattern[(i+2)%len(pattern)]
		verdict(id, "spam", "rev1", v, after+float64(i)*1e-3)
		wantSecond.add("rev1", v, secondSpam[id])
	}
	// rev2 judges 12 of the second run's spam prelabels and 6 of its
	// signals ones.
	for i, id := range items[20:32] {
		v := pattern[(i+1)%len(pattern)]
		verdict(id, "spam", "rev2", v, after+1+float64(i)*1e-3)
		wantSecond.add("rev2", v, secondSpam[id])
	}
	sigItems := slices.Sorted(func(yield func(string) bool) {
		for id := range secondSignals {
			if !yield(id) {
				return
			}
		}
	})
	for i, id := range sigItems[:6] {
		v := []string{"accept", "correct"}[i%2]
		verdict(id, "signals", "rev2", v, after+2+float64(i)*1e-3)
		wantSignals.add("rev2", v, secondSignals[id])
	}
	// Counted for no run: before any prelabel was published, without a
	// schema, and an unknown verdict.
	verdict(items[40], "spam", "rev3", "accept", unix(i1.CreatedAt)-60)
	verdict(items[41], "", "rev3", "accept", after)
	verdict(items[42], "spam", "rev3", "maybe", after)

	report := func(args ...string) reviewReportJSON {
		t.Helper()
		code, out, errb := testproject.Exec(t, r.Command("potato-dispatch", append([]string{"report", cfg, "--json"}, args...)...))
		if code != 0 {
			t.Fatalf("report %v: exit %d: %s", args, code, errb)
		}
		var rep reviewReportJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("report %v: %v\n%s", args, err, out)
		}
		return rep
	}
	rep := report()
	if len(rep.Schemas) != 2 {
		t.Fatalf("the report has %d schemas, want spam and signals", len(rep.Schemas))
	}
	for _, sa := range rep.Schemas {
		if sa.RunID != second {
			t.Errorf("%s: the report is of run %s, want the published %s", sa.Schema, sa.RunID, second)
		}
		switch sa.Schema {
		case "spam":
			wantSecond.check(t, "spam, published run", sa.Review)
		case "signals":
			wantSignals.check(t, "signals, published run", sa.Review)
		}
		if sa.Review != nil && sa.Review.NReplaced != 0 {
			t.Errorf("%s: %d verdicts of the published run on prelabels it no longer holds, want 0", sa.Schema, sa.Review.NReplaced)
		}
	}
	v := rep.Verdicts
	n := 20 + 12 + 6 + 3
	if v.N != n || v.Counted != 5+12+6 || len(v.OtherRuns) != 1 || v.OtherRuns[0].RunID != first || v.OtherRuns[0].N != 15 ||
		v.NoRun != 1 || v.NoSchema != 1 || v.UnknownVerdict != 1 || v.OtherSchema != 0 {
		t.Errorf("verdicts: %+v; want %d in all, %d counted, 15 for run %s, one each with no run, no schema and an unknown verdict", v, n, 5+12+6, first)
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, want := range []string{
		"spam: reviewers' verdicts that count for run " + first + ", which this report is not about (a newer run's prelabels replaced its own): 15; potato-dispatch report --run " + first,
		"reviewers' verdicts that name no schema (the reviewer's client sent none): 1;",
		"reviewers' verdicts on an item and schema for which no run whose record is still here had published a prelabel before the verdict: 1;",
		"reviewers' verdicts that are neither accept, correct nor reject: 1;",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("the notes lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "pre_annotation") {
		t.Errorf("a note speaks of pre_annotation:\n%s", notes)
	}
	if !strings.Contains(rep.ReviewRule, "accept counts as right, correct and reject as wrong") || !strings.Contains(rep.ReviewRule, "Wilson") {
		t.Errorf("the review rule does not say how verdicts count: %s", rep.ReviewRule)
	}

	// The first run's own report: its verdicts, on prelabels it no longer
	// holds.
	old := report("--run", first)
	for _, sa := range old.Schemas {
		if sa.Schema != "spam" {
			continue
		}
		wantFirst.check(t, "spam, replaced run", sa.Review)
		if sa.Review != nil && sa.Review.NReplaced != 15 {
			t.Errorf("the replaced run: %d verdicts on prelabels it no longer holds, want 15", sa.Review.NReplaced)
		}
	}
	if o := old.Verdicts.OtherRuns; len(o) != 2 || o[0].Schema != "signals" || o[0].RunID != second || o[0].N != 6 ||
		o[1].Schema != "spam" || o[1].RunID != second || o[1].N != 17 {
		t.Errorf("report --run %s: the other runs' verdicts are %+v, want 6 of signals and 17 of spam for %s", first, o, second)
	}

	// The text says the same.
	code, out, errb = testproject.Exec(t, r.Command("potato-dispatch", "report", cfg))
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, errb)
	}
	a := wantSecond.all
	lo, hi := wilson95(a.Accept, a.N)
	for _, want := range []string{
		fmt.Sprintf("reviewers' verdicts (Potato's model review): %d by 2 reviewers, %d accept, %d correct, %d reject: precision %.3f (95%% CI %.2f-%.2f)",
			a.N, a.Accept, a.Correct, a.Reject, float64(a.Accept)/float64(a.N), lo, hi),
		"How reviewers' verdicts count:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q:\n%s", want, out)
		}
	}
	var lines []string
	for l := range strings.Lines(out) {
		if f := strings.Fields(l); slices.Equal(f, []string{"by", "prelabel", "label", "verdicts", "accept", "correct", "reject", "precision", "95%", "CI"}) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		t.Errorf("the text report has %d tables of verdicts by label, want 2 (spam and signals):\n%s", len(lines), out)
	}

	// Where Potato (2.11 and later) shows none of the stored prelabels, a
	// note says the shares measure agreement, not acceptance: a schema
	// left out of writeback.schemas, or model_training.enabled off.
	shown := regexp.MustCompile(`(?m)^.*measure agreement with the model, not acceptance.*$`)
	if n := shown.FindAllString(strings.Join(rep.Notes, "\n"), -1); len(n) != 0 {
		t.Errorf("with both schemas written back, notes say Potato shows none: %q", n)
	}
	text, _ := os.ReadFile(cfg)
	spamOnly := strings.Replace(string(text), "schemas: [spam, signals]", "schemas: [spam]", 1)
	if err := os.WriteFile(cfg, []byte(spamOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := shown.FindAllString(strings.Join(report().Notes, "\n"), -1); len(n) != 1 || !strings.HasPrefix(n[0], "signals is not in model_training.writeback.schemas, so Potato (2.11 and later) puts none of its stored prelabels back") {
		t.Errorf("signals left out of writeback.schemas: notes %q", n)
	}
	off := strings.Replace(spamOnly, "  enabled: true\n", "  enabled: false\n", 1)
	if err := os.WriteFile(cfg, []byte(off), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := shown.FindAllString(strings.Join(report().Notes, "\n"), -1); len(n) != 1 || !strings.HasPrefix(n[0], "model_training.enabled is not true in the config, so Potato (2.11 and later) puts no stored prelabel back") {
		t.Errorf("model_training.enabled off: notes %q", n)
	}
}

// writebackBoth sets writeback.schemas to both schemas of the emails
// project.
func writebackBoth(t *testing.T, cfg string) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	both := strings.Replace(string(b), "    schemas: [spam]\n", "    schemas: [spam, signals]\n", 1)
	if both == string(b) {
		t.Fatal("the emails config has no writeback.schemas: [spam]")
	}
	if err := os.WriteFile(cfg, []byte(both), 0o644); err != nil {
		t.Fatal(err)
	}
}
