package dispatch

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/writeback"
)

// gateSchema is the nominal schema of gateBundle.
var gateSchema = bundle.Schema{Name: "s", Kind: config.KindNominal, Labels: []string{"a", "b"}}

// gateBundle writes a bundle of 200 test items, gold labels a and b in
// turn.
func gateBundle(t *testing.T) string {
	t.Helper()
	bdir := t.TempDir()
	var test strings.Builder
	for i := range 200 {
		b, _ := json.Marshal(map[string]any{"instance_id": fmt.Sprintf("e%d", i), "text": "x", "targets": map[string]any{"s": "ab"[i%2 : i%2+1]}})
		test.Write(append(b, '\n'))
	}
	m := bundle.Manifest{V: 1, Schemas: []bundle.Schema{gateSchema},
		Splits: map[string]bundle.SplitFile{"test": {Path: "test.jsonl", Format: "jsonl", N: 200}}}
	mb, _ := json.Marshal(m)
	for name, text := range map[string]string{"manifest.json": string(mb), "test.jsonl": test.String()} {
		if err := os.WriteFile(filepath.Join(bdir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return bdir
}

// gatePredictions writes predictions of the 200 test items, the first
// wrong of them wrong.
func gatePredictions(t *testing.T, wrong int) string {
	t.Helper()
	var b strings.Builder
	for i := range 200 {
		l := "ab"[i%2 : i%2+1]
		if i < wrong {
			l = "ba"[i%2 : i%2+1]
		}
		fmt.Fprintf(&b, `{"instance_id":"e%d","schema_name":"s","payload":{"label":%q,"confidence":0.9},"confidence":0.9}`+"\n", i, l)
	}
	path := filepath.Join(t.TempDir(), "predictions.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The gate without writeback.margin: a first run records its own score;
// against a published run wrong on 20 of 200 test items, a run wrong on
// 22 is published (lower within noise), one wrong on 60 is not (worse
// beyond noise), and one wrong on 10 is (better). With margin 0 set, the
// run wrong on 22 is held back, as before the bootstrap.
func TestGateBootstrap(t *testing.T) {
	bdir := gateBundle(t)
	st, err := writeback.OpenStore(filepath.Join(t.TempDir(), "project.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old := gatePredictions(t, 20)
	own, err := writeback.Score(bdir, old, []bundle.Schema{gateSchema})
	if err != nil {
		t.Fatal(err)
	}
	first, err := decide(st, "p", writeback.ReadRun(bdir, old, []bundle.Schema{gateSchema}, nil, nil), "old", gateSchema, gateRule{}, own["s"])
	if err != nil || !first.Published || first.N != 200 || first.MacroF1 != own["s"].MacroF1 || first.MacroF1 < 0.85 || first.Bootstrap != nil {
		t.Fatalf("first run: %+v %v", first, err)
	}
	if _, err := st.Publish(bdir, old, writeback.Options{Project: "p", RunID: "old", Schemas: []string{"s"}, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		wrong     int
		rule      gateRule
		published bool
		says      string
	}{
		{22, gateRule{}, true, "published: macro-F1 0.89 < 0.90 of run old on 200 test items, within noise (paired bootstrap: difference -0.010"},
		{60, gateRule{}, false, "not published: macro-F1 0.70 < 0.90 of run old on 200 test items, worse beyond noise (paired bootstrap: difference -0.200"},
		{10, gateRule{}, true, "published: macro-F1 0.95 >= 0.90 of run old on 200 test items (paired bootstrap: difference +0.050"},
		{22, gateRule{set: true}, false, "not published: macro-F1 0.89 < 0.90 of run old on 200 test items (paired bootstrap"},
		{22, gateRule{margin: -0.02, set: true}, true, "published: macro-F1 0.89 >= 0.90 of run old -0.02 margin on 200 test items"},
	} {
		d, err := decide(st, "p", writeback.ReadRun(bdir, gatePredictions(t, c.wrong), []bundle.Schema{gateSchema}, nil, nil), "new", gateSchema, c.rule, writeback.SchemaScore{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Published != c.published || !strings.HasPrefix(d.Reason, c.says) || d.Against != "old" || d.N != 200 || d.Bootstrap == nil ||
			d.Bootstrap.Resamples != writeback.GateResamples || d.Bootstrap.Seed != writeback.GateSeed {
			t.Errorf("wrong on %d, %+v: %+v (bootstrap %+v)\nwant %v, %q", c.wrong, c.rule, d, d.Bootstrap, c.published, c.says)
		}
	}
}
