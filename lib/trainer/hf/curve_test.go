package hf_test

import (
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/backend/local"
	"potato-training/lib/curve"
	"potato-training/lib/trainer/hf"
)

// TestDispatchCurve: potato-dispatch curve with hf-text-classification
// (model=builtin:ngram, on a CPU torch) over the real emails, a small
// train split (48 labelled emails, 392 test emails): every point is
// scored on the same test emails, each fitted on the items the order of
// potato-events(5) gives, in each of the trainer's 3 default draws, the
// curve rises from 25% to 100%, and the run keeps no model.
func TestDispatchCurve(t *testing.T) {
	testcli.Short(t, "a real fine-tune (12 fits of the torch loop; test_curve.py covers the loop's curve)")
	t.Parallel()
	py := torchPython(t)
	dir := t.TempDir()
	emails := testproject.Emails(t, testcli.Root())
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir,
		Config: testproject.WriteEmails(t, dir, emails, len(emails), "  splits: {train: 0.1, val: 0.1, test: 0.8}\n"),
		Env:    []string{local.PythonEnv + "=" + py, "POTATO_TRAINING_STALL_TIMEOUT_S=120"}}
	code, out, errs := testproject.Exec(t, r.Command("potato-dispatch", "curve", r.Config, "--trainer", hf.Name,
		"--param", "model=builtin:ngram", "--schemas", "spam", "--backend", "local"))
	id, report, _ := strings.Cut(out, "\n")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s\nrun.log:\n%s", code, out, errs, r.File(id, "run.log"))
	}
	t.Logf("%s", report)
	info := r.Info(id)
	if info.Curve == nil || len(info.Curve.Schemas) != 1 {
		t.Fatalf("curve %+v", info.Curve)
	}
	s := info.Curve.Schemas[0]
	if s.NTest != 392 || len(s.Points) != 4 || s.Draws != 3 {
		t.Fatalf("%d test items, %d points, %d draws: want 392, 4 and the trainer's default 3", s.NTest, len(s.Points), s.Draws)
	}
	for _, p := range s.Points {
		if p.NTrain != curve.Size(s.NTrainSplit, p.Percent) || p.NMissing != 0 {
			t.Errorf("point %v: %d items, %d missing; want %d and none", p.Percent, p.NTrain, p.NMissing, curve.Size(s.NTrainSplit, p.Percent))
		}
	}
	first, last := s.Points[0], s.Points[3]
	if last.MacroF1 <= first.MacroF1 {
		t.Errorf("macro-F1 %.3f at 25%%, %.3f at 100%%: want a rise", first.MacroF1, last.MacroF1)
	}
	if strings.Contains(r.File(id, "run.log"), "warning: curve point") {
		t.Errorf("the trainer's n_train differ from the dispatch's:\n%s", r.File(id, "run.log"))
	}
	if info.ArtifactURI != "" && strings.Contains(r.File(id, "artifacts/model-spam/model_card.json"), "{") {
		t.Errorf("a curve run kept a model")
	}
}
