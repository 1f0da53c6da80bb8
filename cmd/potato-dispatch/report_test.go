package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
)

// acceptanceProject is a real run on real emails whose prelabels three
// annotators then label, so that what the report must say is known:
// "copier" sets every prelabel it is shown as its label, "truth" gives the
// corpus's label, and "early" labelled ten of the same items in a file
// last written before the run published (so could not have seen them).
// On one item "truth" answered without choosing a label, which leaves the
// item out. "truth" also labels ten items of the test split, which were
// labelled before the run and are no part of the report.
type acceptanceProject struct {
	r        *testproject.Runs
	id       string
	prelabel map[string]string // item of the unlabeled split -> its prelabel
	truth    map[string]string // every email's corpus label
	answered string            // the item "truth" answered without a label
	judged   []string          // the items whose labels count
	early    map[string]bool   // the items "early" labelled
	test     []string          // items of the test split that "truth" labels
}

func newAcceptanceProject(t *testing.T) *acceptanceProject {
	t.Helper()
	dir := t.TempDir()
	emails := testproject.Emails(t, testcli.Root())[:260]
	p := &acceptanceProject{prelabel: map[string]string{}, truth: map[string]string{}, early: map[string]bool{}}
	for _, e := range emails {
		p.truth[e.ID] = e.Label
	}
	p.r = &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.WriteEmails(t, dir, emails, 60, "")}
	res := p.r.Run("--trainer", "tfidf-logreg", "--schemas", "spam")
	if res.Code != 0 {
		t.Fatalf("run: exit %d: %s", res.Code, res.Stderr)
	}
	p.id = res.ID

	// What Potato shows: the run's rows, on the items of each split.
	db, err := sql.Open("sqlite", filepath.Join(dir, "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT p.instance_id, p.payload, i.split FROM training_predictions p
		JOIN training_run_items i ON i.run_id = p.run_id AND i.instance_id = p.instance_id
		WHERE p.run_id = ? AND p.schema_name = 'spam' ORDER BY p.instance_id`, p.id)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, payload, split string
		var pl struct{ Label string }
		if err := rows.Scan(&id, &payload, &split); err != nil || json.Unmarshal([]byte(payload), &pl) != nil {
			t.Fatalf("row %s %s: %v", id, payload, err)
		}
		switch split {
		case "unlabeled":
			p.prelabel[id] = pl.Label
		case "test":
			if len(p.test) < 10 {
				p.test = append(p.test, id)
			}
		}
	}
	rows.Close()
	if len(p.prelabel) < 100 || len(p.test) < 5 {
		t.Fatalf("%d prelabels on unlabeled items and %d test items; the project needs more", len(p.prelabel), len(p.test))
	}

	vote := func(label, value string) []any {
		return []any{[]any{map[string]string{"schema": "spam", "name": label}, value}}
	}
	copier, truth, early := map[string]any{}, map[string]any{}, map[string]any{}
	for id, label := range p.prelabel {
		switch {
		case p.answered == "":
			p.answered = id
			truth[id] = vote(p.truth[id], "false")
		default:
			truth[id] = vote(p.truth[id], "true")
			p.judged = append(p.judged, id)
			if len(early) < 10 {
				early[id] = vote(p.truth[id], "true")
				p.early[id] = true
			}
		}
		copier[id] = vote(label, "true")
	}
	for _, id := range p.test {
		truth[id] = vote(p.truth[id], "true")
	}
	writeState(t, dir, "copier", copier)
	writeState(t, dir, "truth", truth)
	writeState(t, dir, "early", early)
	// "early" last wrote its file before the run's bundle was even built.
	before := p.r.Info(p.id).CreatedAt.Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "annotation_output", "early", "user_state.json"), before, before); err != nil {
		t.Fatal(err)
	}
	return p
}

type tallyJSON struct {
	Name     string  `json:"name"`
	N        int     `json:"n"`
	Accepted int     `json:"accepted"`
	Share    float64 `json:"share"`
	Low      float64 `json:"ci95_low"`
	High     float64 `json:"ci95_high"`
	Flag     string  `json:"flag"`
}

// potato-dispatch report on a project whose answer is known: the
// annotator who copies every prelabel accepted all of them and is flagged
// (possible automation bias); the one who labels the truth accepted
// exactly the prelabels that are right and is not; the shares by label
// are those worked out from the prelabels and the corpus; labels in a file
// last written before the run published, an item answered without a
// label, and items labelled before the run are left out, and the report
// counts them.
func TestReportFlagsCopier(t *testing.T) {
	p := newAcceptanceProject(t)
	n := len(p.judged)
	right := 0
	perLabel := map[string][2]int{} // label -> labels, accepted
	for _, id := range p.judged {
		l := p.prelabel[id]
		c := perLabel[l]
		c[0] += 2 // copier and truth
		c[1]++    // copier
		if p.truth[id] == l {
			right++
			c[1]++
		}
		perLabel[l] = c
	}
	if right*50 >= n*49 {
		t.Fatalf("the model is right on %d of %d items: too good to tell the annotators apart", right, n)
	}

	code, stdout, stderr := runDispatch(t, p.r, nil, "report", p.r.Config, "--json")
	if code != 0 {
		t.Fatalf("report --json: exit %d, stderr %q", code, stderr)
	}
	var got struct {
		SawPrelabel string `json:"saw_prelabel"`
		Schemas     []struct {
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
		Flags []struct {
			Kind, Schema, Name string
			N, Accepted        int
			PIfHeldout         *float64 `json:"p_if_heldout"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("report --json: %v\n%s", err, stdout)
	}
	if len(got.Schemas) != 1 {
		t.Fatalf("schemas %+v, want spam alone", got.Schemas)
	}
	s := got.Schemas[0]
	if s.Schema != "spam" || s.RunID != p.id || s.NPrelabels != len(p.prelabel) || s.NItemsLabeled != n ||
		s.NBeforePublish != 10 || s.NAnswered != 1 {
		t.Errorf("spam: run %s, %d prelabels, %d items labelled, %d labels before publish, %d answered without a label; want %s, %d, %d, 10, 1",
			s.RunID, s.NPrelabels, s.NItemsLabeled, s.NBeforePublish, s.NAnswered, p.id, len(p.prelabel), n)
	}
	if s.All.N != 2*n || s.All.Accepted != n+right {
		t.Errorf("all: %d of %d accepted, want %d of %d", s.All.Accepted, s.All.N, n+right, 2*n)
	}
	ann := map[string]tallyJSON{}
	for _, a := range s.Annotators {
		ann[a.Name] = a
	}
	if c := ann["copier"]; c.N != n || c.Accepted != n || c.Share != 1 || c.Flag == "" || c.High != 1 || c.Low <= 0.9 {
		t.Errorf("copier: %+v; want %d of %d, share 1, flagged", c, n, n)
	}
	if tr := ann["truth"]; tr.N != n || tr.Accepted != right || tr.Share != float64(right)/float64(n) || tr.Flag != "" {
		t.Errorf("truth: %+v; want %d of %d, not flagged", tr, right, n)
	}
	if len(ann) != 2 {
		t.Errorf("annotators %+v: want copier and truth (early's file predates the run, ann's labels are in its bundle)", s.Annotators)
	}
	for _, l := range s.Labels {
		if w := perLabel[l.Name]; l.N != w[0] || l.Accepted != w[1] {
			t.Errorf("label %s: %d of %d accepted, want %d of %d", l.Name, l.Accepted, l.N, w[1], w[0])
		}
	}
	if len(s.Labels) != len(perLabel) {
		t.Errorf("labels %+v, want %v", s.Labels, perLabel)
	}
	if len(got.Flags) != 1 || got.Flags[0].Kind != "annotator" || got.Flags[0].Name != "copier" || got.Flags[0].Schema != "spam" ||
		got.Flags[0].PIfHeldout == nil || *got.Flags[0].PIfHeldout > 0.01 {
		t.Errorf("flags %+v, want copier's alone, with a small chance under the held-out accuracy", got.Flags)
	}
	if !strings.Contains(got.SawPrelabel, "unlabeled split") || !strings.Contains(got.SawPrelabel, "no time per label") {
		t.Errorf("saw_prelabel does not say how it is decided: %q", got.SawPrelabel)
	}

	code, stdout, stderr = runDispatch(t, p.r, nil, "report", p.r.Config)
	if code != 0 || stderr != "" {
		t.Fatalf("report: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("spam (nominal): run %s (tfidf-logreg)", p.id),
		fmt.Sprintf("%d prelabels on items unlabeled in its bundle; %d of those items labelled since", len(p.prelabel), n),
		fmt.Sprintf("%d labels on them, %d equal to the prelabel", 2*n, n+right),
		"10 labels left out: their annotator's user_state.json was last written before the run published",
		"1 items left out: an annotator's answer on them has no label",
		fmt.Sprintf(`annotator "copier" in spam: %d of %d accepted (1.000): possible automation bias`, n, n),
		`How "saw its prelabel" is decided:`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report does not say %q:\n%s", want, stdout)
		}
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "truth ") && strings.Contains(line, "flag") {
			t.Errorf("truth is flagged: %s", line)
		}
	}
}

// potato-dispatch explain names, for an item's prelabel, the run that made
// it with its held-out score, the digest of the bundle it trained on and
// the item's split there, and the annotators' labels now; an item of the
// train split has no prelabel, and an item nobody labelled or prelabelled
// exits 1.
func TestExplain(t *testing.T) {
	p := newAcceptanceProject(t)
	item := ""
	for _, id := range p.judged {
		if !p.early[id] {
			item = id
			break
		}
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
		"spam (nominal)\n  prelabel: " + p.prelabel[item] + ", confidence ",
		"  made by run " + p.id + " (tfidf-logreg, success), published ",
		fmt.Sprintf("  its held-out score: accuracy %.3f, macro-F1 %.3f on %d test items\n", held.Accuracy, held.MacroF1, held.N),
		"  trained on bundle " + m.Digest + "; the item was in its unlabeled split\n",
		"    copier: " + p.prelabel[item] + " (the prelabel)\n",
		"    truth: " + p.truth[item] + " " + ok(p.truth[item] == p.prelabel[item]) + "\n",
		"signals (multilabel)\n  prelabel: none\n  annotators: none has labelled it\n",
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
	sp := got.Schemas[0]
	if got.Item != item || sp.Schema != "spam" || sp.Prelabel == nil || sp.Prelabel.RunID != p.id || sp.Prelabel.BundleDigest != m.Digest ||
		sp.Prelabel.Split != "unlabeled" || sp.Prelabel.Confidence == nil || *sp.Prelabel.Confidence != conf ||
		len(sp.Prelabel.Labels) != 1 || sp.Prelabel.Labels[0] != p.prelabel[item] || sp.Prelabel.Heldout == nil || sp.Prelabel.Heldout.Accuracy != held.Accuracy {
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
	if code != 0 || !strings.Contains(stdout, "spam (nominal)\n  prelabel: none\n  annotators now:\n    ann: "+p.truth[train]+"\n") {
		t.Errorf("a train item: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr = runDispatch(t, p.r, nil, "explain", p.r.Config, "no-such-item")
	if code != 1 || stdout != "" || !strings.Contains(stderr, `potato-dispatch: error: item "no-such-item": no prelabel and no label in any schema`) {
		t.Errorf("an unknown item: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
