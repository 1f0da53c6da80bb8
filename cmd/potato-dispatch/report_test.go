package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
)

// acceptanceProject is a real run on real emails, of a radio schema
// (spam) and a multiselect one (signals), whose prelabels three annotators
// then label, so that what the report must say is known: "copier" sets
// every prelabel it is shown as its label (no box checked for a prelabel
// of no signal), "truth" gives the corpus's label and the signals the
// text has, and "early" labelled ten of the same items in a file last
// written before the run published (so could not have seen them). On one
// item "truth" answered spam without choosing a label, which leaves the
// item out of spam. "truth" also labels ten items of the test split, which
// were labelled before the run and are no part of the report. The large
// project (every email, 300 of them labelled, 40% of those in the test
// split) has a fourth annotator, "few", who copies the spam prelabels of
// fifteen items only.
type acceptanceProject struct {
	r  *testproject.Runs
	id string
	// prelabel[schema][item] is the run's prelabel of an item of its
	// unlabeled split: one label, or the sorted signals.
	prelabel map[string]map[string][]string
	truth    map[string]map[string][]string // the same, of every email
	answered string                         // the item "truth" answered spam without a label
	early    []string                       // the items "early" labelled
	test     []string                       // items of the test split that "truth" labels
	few      []string                       // the items "few" labelled (the large project)
}

var schemaNames = []string{"spam", "signals"}

func newAcceptanceProject(t *testing.T, large bool) *acceptanceProject {
	t.Helper()
	dir := t.TempDir()
	emails, labelled, splits := testproject.Emails(t, testcli.Root())[:260], 60, ""
	if large {
		emails, labelled, splits = testproject.Emails(t, testcli.Root()), 300, "  splits: {train: 0.15, val: 0.05, test: 0.8}\n"
	}
	p := &acceptanceProject{
		prelabel: map[string]map[string][]string{"spam": {}, "signals": {}},
		truth:    map[string]map[string][]string{"spam": {}, "signals": {}},
	}
	for _, e := range emails {
		p.truth["spam"][e.ID] = []string{e.Label}
		sig := testproject.Signals(e.Text)
		slices.Sort(sig)
		p.truth["signals"][e.ID] = sig
	}
	cfg := testproject.WriteEmails(t, dir, emails, labelled, splits)
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	both := strings.Replace(string(text), "    schemas: [spam]\n", "    schemas: [spam, signals]\n", 1)
	if both == string(text) {
		t.Fatal("the emails config has no writeback.schemas: [spam]")
	}
	if err := os.WriteFile(cfg, []byte(both), 0o644); err != nil {
		t.Fatal(err)
	}
	p.r = &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: cfg}
	res := p.r.Run("--trainer", "tfidf-logreg", "--schemas", "spam,signals")
	if res.Code != 0 {
		t.Fatalf("run: exit %d: %s", res.Code, res.Stderr)
	}
	p.id = res.ID
	// On 60 labelled emails the val split is too small to show that the
	// models learnt (potato-dispatch(1), PROMOTION), and the run may hold
	// its prelabels back; the report is of prelabels annotators were
	// shown, so they are published by hand.
	if code, _, stderr := runDispatch(t, p.r, nil, "publish", cfg, p.id); code != 0 {
		t.Fatalf("publish: exit %d: %s", code, stderr)
	}

	// What Potato shows: the run's rows, on the items of each split (an
	// item without a row of the run's was in its unlabeled split).
	rows, err := sqlDB(t, dir).Query(`SELECT p.instance_id, p.schema_name, p.payload, coalesce(i.split, 'unlabeled') FROM training_predictions p
		LEFT JOIN training_run_items i ON i.run_id = p.run_id AND i.instance_id = p.instance_id
		WHERE p.run_id = ? ORDER BY p.instance_id`, p.id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, schema, payload, split string
		if err := rows.Scan(&id, &schema, &payload, &split); err != nil {
			t.Fatal(err)
		}
		switch {
		case split == "unlabeled":
			p.prelabel[schema][id] = storedNames(t, payload)
		case split == "test" && schema == "spam" && len(p.test) < 10:
			p.test = append(p.test, id)
		}
	}
	rows.Close()
	if len(p.prelabel["spam"]) < 100 || len(p.prelabel["signals"]) < 60 || len(p.test) < 5 {
		t.Fatalf("%d spam and %d signals prelabels on unlabeled items, %d test items; the project needs more",
			len(p.prelabel["spam"]), len(p.prelabel["signals"]), len(p.test))
	}

	votes := func(schema string, names []string, value string) []any {
		var out []any
		for _, n := range names {
			out = append(out, []any{map[string]string{"schema": schema, "name": n}, value})
		}
		if schema == "signals" && len(names) == 0 {
			// No box checked, as Potato keeps it.
			for _, n := range []string{"link", "reply", "html"} {
				out = append(out, []any{map[string]string{"schema": schema, "name": n}, "false"})
			}
		}
		return out
	}
	copier, truth, early, few := map[string][]any{}, map[string][]any{}, map[string][]any{}, map[string][]any{}
	for _, id := range slices.Sorted(maps.Keys(p.prelabel["spam"])) {
		value := "true"
		if p.answered == "" {
			p.answered, value = id, "false"
		} else if len(p.early) < 10 {
			p.early = append(p.early, id)
			early[id] = append(votes("spam", p.truth["spam"][id], "true"), votes("signals", p.truth["signals"][id], "true")...)
		} else if large && len(p.few) < 15 {
			p.few = append(p.few, id)
			few[id] = votes("spam", p.prelabel["spam"][id], "true")
		}
		truth[id] = append(truth[id], votes("spam", p.truth["spam"][id], value)...)
	}
	for _, schema := range schemaNames {
		for id, names := range p.prelabel[schema] {
			copier[id] = append(copier[id], votes(schema, names, "true")...)
			if schema == "signals" {
				truth[id] = append(truth[id], votes(schema, p.truth[schema][id], "true")...)
			}
		}
	}
	for _, id := range p.test {
		truth[id] = votes("spam", p.truth["spam"][id], "true")
	}
	states := map[string]map[string][]any{"copier": copier, "truth": truth, "early": early}
	if large {
		states["few"] = few
	}
	for name, state := range states {
		m := map[string]any{}
		for id, v := range state {
			m[id] = v
		}
		writeState(t, dir, name, m)
	}
	// "early" last wrote its file before the run's bundle was even built.
	before := p.r.Info(p.id).CreatedAt.Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "annotation_output", "early", "user_state.json"), before, before); err != nil {
		t.Fatal(err)
	}
	return p
}

// storedNames are the label names of a stored prelabel: {"label": name}
// or a multiselect's list of {"label": name}, sorted.
func storedNames(t *testing.T, payload string) []string {
	t.Helper()
	var one struct{ Label string }
	if json.Unmarshal([]byte(payload), &one) == nil {
		return []string{one.Label}
	}
	var list []struct{ Label string }
	if err := json.Unmarshal([]byte(payload), &list); err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	names := []string{}
	for _, e := range list {
		names = append(names, e.Label)
	}
	slices.Sort(names)
	return names
}

type biasJSON struct {
	N           int      `json:"n"`
	Agreed      int      `json:"agreed"`
	Observed    float64  `json:"observed"`
	Expected    float64  `json:"expected"`
	PValue      *float64 `json:"p_value"`
	PMin        float64  `json:"p_min"`
	Counted     bool     `json:"counted"`
	Level       float64  `json:"level"`
	Verdict     string   `json:"verdict"`
	ItemsNeeded *int     `json:"items_needed"`
	MoreItems   *int     `json:"more_items"`
}

type tallyJSON struct {
	Name     string    `json:"name"`
	N        int       `json:"n"`
	Accepted int       `json:"accepted"`
	Share    float64   `json:"share"`
	Low      float64   `json:"ci95_low"`
	High     float64   `json:"ci95_high"`
	Flag     string    `json:"flag"`
	Bias     *biasJSON `json:"bias"`
}

// count is a row the report must have: labels and how many accepted.
type count struct{ n, accepted int }

func (c *count) add(ok bool) {
	c.n++
	if ok {
		c.accepted++
	}
}

// heldoutAgreement reads, from the run's run.json, what a careful
// annotator agrees with a prelabel as: for spam the precision of its
// label on the test split, for signals the subset accuracy.
func heldoutAgreement(t *testing.T, p *acceptanceProject) func(schema string, pre []string) float64 {
	t.Helper()
	var rec struct {
		Metrics struct {
			Heldout map[string]struct {
				N        int
				Accuracy float64
				Labels   []struct {
					Label  string
					TP, FP int
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(p.r.File(p.id, "run.json")), &rec); err != nil {
		t.Fatal(err)
	}
	prec := map[string]float64{}
	for _, l := range rec.Metrics.Heldout["spam"].Labels {
		prec[l.Label] = float64(l.TP) / float64(l.TP+l.FP)
	}
	sig := rec.Metrics.Heldout["signals"]
	if len(prec) != 2 || sig.N < 50 {
		t.Fatalf("run.json's held-out figures: %+v", rec.Metrics.Heldout)
	}
	subset := math.Round(sig.Accuracy*float64(sig.N)) / float64(sig.N)
	return func(schema string, pre []string) float64 {
		if schema == "spam" {
			return prec[pre[0]]
		}
		return subset
	}
}

// potato-dispatch report on a project whose answer is known: the
// annotator who copies every prelabel accepted all of them, far more
// often than the run's held-out precision says a careful annotator would,
// and is flagged (possible automation bias) in both schemas; the one who
// labels the truth accepted exactly the prelabels that are right, about
// as often as expected, and is not; the one who copied fifteen prelabels
// cannot be told apart yet, and the report says how many labels would.
// Each annotator's expected agreement is the one worked out here from
// run.json's held-out figures; the shares by annotator and by label, in
// the radio and the multiselect schema, and the label flags, are those
// worked out here from the prelabels and the corpus; labels in a file last
// written before the run published, an item answered without a label,
// and items labelled before the run are left out, and the report counts
// them.
func TestReportFlagsCopier(t *testing.T) {
	t.Parallel()
	p := newAcceptanceProject(t, true)
	agreement := heldoutAgreement(t, p)
	type expect struct {
		items, before int
		all           count
		ann, label    map[string]*count
		expected      map[string]float64
	}
	want := map[string]*expect{}
	overall := map[string]*count{"copier": {}, "truth": {}, "few": {}}
	flags := map[string]bool{}
	for _, schema := range schemaNames {
		e := &expect{ann: map[string]*count{"copier": {}, "truth": {}}, label: map[string]*count{}, expected: map[string]float64{}}
		if schema == "spam" {
			e.ann["few"] = &count{}
		}
		want[schema] = e
		for id, pre := range p.prelabel[schema] {
			if schema == "spam" && id == p.answered {
				continue
			}
			if slices.Contains(p.early, id) {
				e.before++
			}
			e.items++
			labels := map[string][]string{"copier": pre, "truth": p.truth[schema][id]}
			if schema == "spam" && slices.Contains(p.few, id) {
				labels["few"] = pre
			}
			for name, label := range labels {
				ok := slices.Equal(label, pre)
				e.all.add(ok)
				e.ann[name].add(ok)
				e.expected[name] += agreement(schema, pre)
				overall[name].add(ok)
				if len(pre) == 0 {
					if e.label["(none)"] == nil {
						e.label["(none)"] = &count{}
					}
					e.label["(none)"].add(len(label) == 0)
				}
				for _, l := range pre {
					if e.label[l] == nil {
						e.label[l] = &count{}
					}
					e.label[l].add(slices.Contains(label, l))
				}
			}
		}
		for name, c := range e.ann {
			e.expected[name] /= float64(c.n)
		}
		for name, c := range e.label {
			if c.n >= 10 && 2*c.accepted < c.n {
				flags["label "+schema+" "+name] = true
			}
		}
		flags["annotator "+schema+" copier"] = true
	}
	if s := want["spam"]; s.ann["truth"].accepted == s.ann["truth"].n || len(p.few) != 15 {
		t.Fatalf("the model is right on %d of %d spam items, %d items for few: the project cannot tell the annotators apart", s.ann["truth"].accepted, s.ann["truth"].n, len(p.few))
	}

	code, stdout, stderr := runDispatch(t, p.r, nil, "report", p.r.Config, "--json")
	if code != 0 {
		t.Fatalf("report --json: exit %d, stderr %q", code, stderr)
	}
	var got struct {
		SawPrelabel string `json:"saw_prelabel"`
		BiasRule    string `json:"bias_rule"`
		BiasFamily  struct {
			Alpha                   float64
			Tests, Counted, Flagged int
		} `json:"bias_family"`
		Schemas []struct {
			Schema         string
			RunID          string      `json:"run_id"`
			NPrelabels     int         `json:"n_prelabels"`
			NItemsLabeled  int         `json:"n_items_labeled"`
			NBeforePublish int         `json:"n_labels_before_publish"`
			NAnswered      int         `json:"n_items_answered_without_label"`
			All            tallyJSON   `json:"all"`
			Annotators     []tallyJSON `json:"annotators"`
			Labels         []tallyJSON `json:"labels"`
		}
		Annotators []tallyJSON `json:"annotators"`
		Flags      []struct {
			Kind, Schema, Name string
			N, Accepted        int
			Bias               *biasJSON
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("report --json: %v\n%s", err, stdout)
	}
	if len(got.Schemas) != 2 {
		t.Fatalf("schemas %+v, want signals and spam", got.Schemas)
	}
	check := func(what string, g tallyJSON, w *count) {
		t.Helper()
		if w == nil || g.N != w.n || g.Accepted != w.accepted || g.Share != float64(w.accepted)/float64(w.n) {
			t.Errorf("%s: %d of %d accepted, share %v; want %+v", what, g.Accepted, g.N, g.Share, w)
		}
	}
	for _, s := range got.Schemas {
		w := want[s.Schema]
		answered := 0
		if s.Schema == "spam" {
			answered = 1
		}
		if s.RunID != p.id || s.NPrelabels != len(p.prelabel[s.Schema]) || s.NItemsLabeled != w.items ||
			s.NBeforePublish != w.before || s.NAnswered != answered {
			t.Errorf("%s: run %s, %d prelabels, %d items labelled, %d labels before publish, %d answered without a label; want %s, %d, %d, %d, %d",
				s.Schema, s.RunID, s.NPrelabels, s.NItemsLabeled, s.NBeforePublish, s.NAnswered, p.id, len(p.prelabel[s.Schema]), w.items, w.before, answered)
		}
		check(s.Schema+" in all", s.All, &w.all)
		if len(s.Annotators) != len(w.ann) {
			t.Errorf("%s: annotators %+v, want %d (early's file predates the run, ann's labels are in its bundle)", s.Schema, s.Annotators, len(w.ann))
		}
		for _, a := range s.Annotators {
			check(s.Schema+" by "+a.Name, a, w.ann[a.Name])
			b := a.Bias
			if b == nil || b.PValue == nil || b.N != a.N || b.Agreed != a.Accepted || math.Abs(b.Expected-w.expected[a.Name]) > 1e-9 || b.Observed != a.Share {
				t.Errorf("%s: %s's test %+v, want %d of %d agreeing against %.6f expected", s.Schema, a.Name, b, a.Accepted, a.N, w.expected[a.Name])
				continue
			}
			t.Logf("%s: %s agreed %.3f, expected %.3f, p %.3g (p_min %.3g, level %.3g): %s", s.Schema, a.Name, b.Observed, b.Expected, *b.PValue, b.PMin, b.Level, b.Verdict)
			switch a.Name {
			case "copier":
				if b.Verdict != "flagged" || *b.PValue > b.Level || !strings.HasPrefix(a.Flag, "possible automation bias") {
					t.Errorf("%s: the copier is not flagged: %+v, flag %q", s.Schema, b, a.Flag)
				}
			case "truth":
				if b.Verdict == "flagged" || a.Flag != "" || *b.PValue < 0.05 {
					t.Errorf("%s: the annotator of the truth: %+v, flag %q", s.Schema, b, a.Flag)
				}
			case "few":
				if b.Verdict != "cannot_tell" || b.Counted || b.ItemsNeeded == nil || *b.ItemsNeeded <= 15 || b.MoreItems == nil || *b.MoreItems != *b.ItemsNeeded-15 {
					t.Errorf("%s: few's test %+v, want cannot_tell with the labels needed", s.Schema, b)
				}
			}
		}
		if len(s.Labels) != len(w.label) {
			t.Errorf("%s: labels %+v, want %d", s.Schema, s.Labels, len(w.label))
		}
		for _, l := range s.Labels {
			check(s.Schema+" label "+l.Name, l, w.label[l.Name])
		}
	}
	if c := got.Annotators; len(c) != 3 || c[0].Name != "copier" || c[0].Share != 1 || c[0].High != 1 || c[0].Low <= 0.95 {
		t.Errorf("over all schemas: %+v, want copier first with every prelabel accepted", c)
	}
	for _, a := range got.Annotators {
		check("over all schemas, "+a.Name, a, overall[a.Name])
		if a.Name == "copier" && (a.Bias == nil || a.Bias.Verdict != "flagged" || a.Bias.N != a.N) {
			t.Errorf("over all schemas, the copier's test: %+v", a.Bias)
		}
	}
	// copier and truth in each schema and over both, few in spam.
	if f := got.BiasFamily; f.Alpha != 0.05 || f.Tests != 7 || f.Counted < 4 || f.Counted > 6 || f.Flagged != 3 {
		t.Errorf("bias_family %+v, want 7 tests, 4 to 6 counted, 3 flagged", f)
	}
	gotFlags := map[string]bool{}
	for _, f := range got.Flags {
		gotFlags[f.Kind+" "+f.Schema+" "+f.Name] = true
		if f.Kind == "annotator" && (f.Bias == nil || f.Bias.Verdict != "flagged") {
			t.Errorf("flag %+v without its test", f)
		}
	}
	if !maps.Equal(gotFlags, flags) {
		t.Errorf("flags %v, want %v", gotFlags, flags)
	}
	if !strings.Contains(got.SawPrelabel, "unlabeled split") || !strings.Contains(got.SawPrelabel, "no time per label") {
		t.Errorf("saw_prelabel does not say how it is decided: %q", got.SawPrelabel)
	}
	if !strings.Contains(got.BiasRule, "Holm") || !strings.Contains(got.BiasRule, "not proof of it") {
		t.Errorf("bias_rule does not say how it is decided: %q", got.BiasRule)
	}

	code, stdout, stderr = runDispatch(t, p.r, nil, "report", p.r.Config, "--schema", "spam")
	if code != 0 || stderr != "" {
		t.Fatalf("report: exit %d, stderr %q", code, stderr)
	}
	s := want["spam"]
	for _, want := range []string{
		fmt.Sprintf("spam (nominal): run %s (tfidf-logreg)", p.id),
		"held-out precision by predicted label: ",
		fmt.Sprintf("%d prelabels on items unlabeled in its bundle; %d of those items labelled since", len(p.prelabel["spam"]), s.items),
		fmt.Sprintf("%d labels on them, %d equal to the prelabel", s.all.n, s.all.accepted),
		"10 labels left out: their annotator's user_state.json was last written before the run published",
		"1 items left out: an annotator's answer on them has no label",
		fmt.Sprintf(`annotator "copier" in spam: %d of %d accepted (1.000): possible automation bias: agreed with the prelabels more often than a careful annotator would (1.000 against %.3f expected, p = `, s.items, s.items, s.expected["copier"]),
		fmt.Sprintf("copier: %d of %d agreed (1.000), a careful annotator %.3f; p = ", s.items, s.items, s.expected["copier"]),
		"flagged, possible automation bias (consistent with accepting prelabels unchecked, not proof of it)",
		fmt.Sprintf("few: 15 of 15 agreed (1.000), a careful annotator %.3f; p = ", s.expected["few"]),
		"too few labels to be significant even were every one the prelabel; about ",
		fmt.Sprintf("truth: %d of %d agreed (%.3f), a careful annotator %.3f; p = ", s.ann["truth"].accepted, s.ann["truth"].n, float64(s.ann["truth"].accepted)/float64(s.ann["truth"].n), s.expected["truth"]),
		`How "saw its prelabel" is decided:`,
		"How an annotator is flagged for automation bias:",
	} {
		if !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
			t.Errorf("report does not say %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "signals") {
		t.Errorf("report --schema spam reports signals:\n%s", stdout)
	}
}

// potato-dispatch explain names, for an item's prelabel, the run that made
// it with its held-out score, the digest of the bundle it trained on and
// the item's split there, and the annotators' labels now; an item of the
// train split has no prelabel, and an item nobody labelled or prelabelled
// exits 1.
func TestExplain(t *testing.T) {
	t.Parallel()
	p := newAcceptanceProject(t, false)
	item := ""
	for _, id := range slices.Sorted(maps.Keys(p.prelabel["signals"])) {
		if _, ok := p.prelabel["spam"][id]; ok && id != p.answered && !slices.Contains(p.early, id) {
			item = id
			break
		}
	}
	if item == "" {
		t.Fatal("no item has both prelabels")
	}
	spam, truth := p.prelabel["spam"][item][0], p.truth["spam"][item][0]
	signals := strings.Join(p.prelabel["signals"][item], ", ")
	if signals == "" {
		signals = "no label"
	}
	m, err := bundle.ReadManifest(filepath.Join(p.r.Root().RunDir(p.id), rundir.BundleDir))
	if err != nil || m.Digest == "" {
		t.Fatalf("the run's manifest: %v, digest %q", err, m.Digest)
	}
	held := p.r.Info(p.id).Heldout
	if held == nil {
		t.Fatal("the run has no held-out score")
	}
	code, stdout, stderr := runDispatch(t, p.r, nil, "explain", p.r.Config, item)
	if code != 0 || stderr != "" {
		t.Fatalf("explain: exit %d, stderr %q", code, stderr)
	}
	ok := func(b bool) string {
		if b {
			return "(the prelabel)"
		}
		return "(not the prelabel)"
	}
	for _, want := range []string{
		"item " + item + "\n",
		"spam (nominal)\n  prelabel: " + spam + ", confidence ",
		"  made by run " + p.id + " (tfidf-logreg, success), published ",
		fmt.Sprintf("  its held-out score: accuracy %.3f, macro-F1 %.3f on %d test items\n", held.Accuracy, held.MacroF1, held.N),
		"  trained on bundle " + m.Digest + "; the item was in its unlabeled split\n",
		"    copier: " + spam + " (the prelabel)\n",
		"    truth: " + truth + " " + ok(truth == spam) + "\n",
		"signals (multilabel)\n  prelabel: " + signals + ", confidence ",
		"    copier: " + signals + " (the prelabel)\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("explain does not say %q:\n%s", want, stdout)
		}
	}

	code, stdout, _ = runDispatch(t, p.r, nil, "explain", p.r.Config, item, "--json")
	var got struct {
		Item    string `json:"instance_id"`
		Schemas []struct {
			Schema   string
			Prelabel *struct {
				Labels       []string
				Confidence   *float64
				RunID        string `json:"run_id"`
				BundleDigest string `json:"bundle_digest"`
				Split        string
				Heldout      *struct{ Accuracy float64 }
			}
			Annotators []struct {
				Annotator string
				Label     any
				Accepted  *bool
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != 0 {
		t.Fatalf("explain --json: exit %d, %v\n%s", code, err, stdout)
	}
	var conf float64
	if err := sqlRow(t, p.r.Dir, `SELECT confidence FROM training_predictions WHERE instance_id = ? AND schema_name = 'spam'`, item).Scan(&conf); err != nil {
		t.Fatal(err)
	}
	sp := got.Schemas[0] // spam, the config's first
	if got.Item != item || sp.Schema != "spam" || sp.Prelabel == nil || sp.Prelabel.RunID != p.id || sp.Prelabel.BundleDigest != m.Digest ||
		sp.Prelabel.Split != "unlabeled" || sp.Prelabel.Confidence == nil || *sp.Prelabel.Confidence != conf ||
		len(sp.Prelabel.Labels) != 1 || sp.Prelabel.Labels[0] != spam || sp.Prelabel.Heldout == nil || sp.Prelabel.Heldout.Accuracy != held.Accuracy {
		t.Errorf("explain --json: %s", stdout)
	}
	if len(sp.Annotators) != 2 || sp.Annotators[0].Annotator != "copier" || sp.Annotators[0].Accepted == nil || !*sp.Annotators[0].Accepted {
		t.Errorf("annotators: %s", stdout)
	}

	// An item of the train split: labelled by ann, no prelabel.
	train := ""
	if err := sqlRow(t, p.r.Dir, `SELECT instance_id FROM training_run_items WHERE run_id = ? AND split = 'train' LIMIT 1`, p.id).Scan(&train); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runDispatch(t, p.r, nil, "explain", p.r.Config, train)
	if code != 0 || !strings.Contains(stdout, "spam (nominal)\n  prelabel: none\n  annotators now:\n    ann: "+p.truth["spam"][train][0]+"\n") {
		t.Errorf("a train item: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr = runDispatch(t, p.r, nil, "explain", p.r.Config, "no-such-item")
	if code != 1 || stdout != "" || !strings.Contains(stderr, `potato-dispatch: error: item "no-such-item": no prelabel and no label in any schema`) {
		t.Errorf("an unknown item: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
