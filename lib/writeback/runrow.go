package writeback

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// StorePath is Potato's store of a project: task_dir's project.sqlite
// (FORMATS.md, "Potato's store").
func StorePath(cfg *config.Config) string { return filepath.Join(cfg.TaskDir, StoreName) }

// Unix is t in unix seconds, as the store's columns hold times; 0 for nil.
func Unix(t *time.Time) float64 {
	if t == nil {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// PotatoStatus is the status Potato's training_runs knows for a state of
// run.json: dispatching is the training process starting (running), and
// fetching is collecting, scoring and writing back (evaluating).
func PotatoStatus(state string) string {
	switch state {
	case rundir.StateDispatching:
		return "running"
	case rundir.StateFetching:
		return "evaluating"
	}
	return state
}

// potatoTrigger is the trigger Potato knows: cron starts are automatic.
func potatoTrigger(t string) string {
	switch t {
	case "api", "auto":
		return t
	case "cron":
		return "auto"
	}
	return "manual"
}

// RunRowOf is rec, the record of the run in directory dir, as Potato
// writes a run row (FORMATS.md, "Potato's store"): kinds a list in schema
// order, flat metrics under Potato's names, the split sizes and digest of
// the run's bundle.
func RunRowOf(cfg *config.Config, dir string, rec rundir.Record) RunRow {
	m, merr := bundle.ReadManifest(filepath.Join(dir, rundir.BundleDir))
	kinds := make([]string, 0, len(rec.Schemas))
	for _, name := range rec.Schemas {
		kind := ""
		if sc, ok := cfg.Scheme(name); ok {
			kind = string(sc.Kind)
		} else if merr == nil {
			for _, s := range m.Schemas {
				if s.Name == name {
					kind = string(s.Kind)
				}
			}
		}
		kinds = append(kinds, kind)
	}
	artifacts, _ := filepath.Abs(filepath.Join(dir, rundir.ArtifactsDir))
	if u := rec.ArtifactURI; u != "" && !strings.HasPrefix(u, "file://") {
		artifacts = u // the model stayed on the backend's host
	}
	host := rec.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	row := RunRow{
		Project: cfg.TaskName, RunID: rec.RunID, Trainer: rec.Trainer, Backend: rec.Backend,
		SchemaNames: rec.Schemas, Kinds: kinds, Status: PotatoStatus(rec.State), Trigger: potatoTrigger(rec.Trigger),
		CreatedAt: Unix(&rec.CreatedAt), StartedAt: Unix(rec.StartedAt), FinishedAt: Unix(rec.FinishedAt),
		SplitSeed: int64(cfg.Training.SplitSeed), Params: rec.Params,
		Metrics:     potatoMetrics(rec, dir),
		ArtifactDir: artifacts, ModelVersion: rec.ModelVersion, Error: rec.Error, ErrorCode: rec.ErrorCode,
		Pid: rec.PID, Host: host,
	}
	if row.SchemaNames == nil {
		row.SchemaNames = []string{}
	}
	if merr == nil {
		row.NTrain, row.NVal, row.NTest = m.Stats.Splits["train"], m.Stats.Splits["val"], m.Stats.Splits["test"]
		row.BundleDigest = m.Digest
		row.SplitSeed = int64(m.SplitSeed)
	}
	if rundir.Finished(rec.State) && rec.State != rundir.StateSuccess && row.ErrorCode == "" {
		// Potato's page tells a failure by its code.
		row.ErrorCode = rec.State
		if rec.State == rundir.StateError {
			row.ErrorCode = "dispatch_failed"
		}
	}
	return row
}

// potatoMetrics is the run's metrics as Potato stores them: a flat object
// of numbers. Metric events count as <split>_<name>, the result's own
// metrics are merged over them, and the held-out score of the test split
// is test_accuracy and test_macro_f1 (test_cohen_kappa, test_micro_f1,
// test_mae and test_qwk where scored). A name that starts with a schema ("sentiment/loss", as the
// trainers name them) drops the schema when the run has one; a run with
// several keeps it ("sentiment/test_accuracy") and also has the first
// scored schema's score under the plain names. That score's accuracy is
// also accuracy, which Potato's Training page shows.
func potatoMetrics(rec rundir.Record, dir string) map[string]float64 {
	out := map[string]float64{}
	several := len(rec.Schemas) > 1
	name := func(schema, metric string) string {
		if schema == "" || !several {
			return metric
		}
		return schema + "/" + metric
	}
	split := func(n string) (schema, rest string) {
		if s, r, ok := strings.Cut(n, "/"); ok && slices.Contains(rec.Schemas, s) {
			return s, r
		}
		return "", n
	}
	if f, err := rundir.OpenEvents(dir); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.Contains(line, []byte(`"metric"`)) {
				continue
			}
			e, err := events.Parse(line)
			if err != nil || e.Kind != events.KindMetric {
				continue
			}
			v, ok := e.Fields["value"].(float64)
			if !ok {
				continue
			}
			schema, metric := split(e.String("name"))
			if metric == "" {
				continue
			}
			if s := e.String("split"); s != "" {
				metric = s + "_" + metric
			}
			out[name(schema, metric)] = v
		}
		f.Close()
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Metrics)) {
		if k == "heldout" {
			continue
		}
		if v, ok := number(rec.Metrics[k]); ok {
			schema, metric := split(k)
			out[name(schema, metric)] = v
		}
	}
	var scores map[string]SchemaScore
	if raw, ok := rec.Metrics["heldout"]; ok {
		if b, err := json.Marshal(raw); err == nil {
			_ = json.Unmarshal(b, &scores)
		}
	}
	add := func(schema string, s SchemaScore) {
		out[name(schema, "test_accuracy")] = s.Accuracy
		out[name(schema, "test_macro_f1")] = s.MacroF1
		if s.CohenKappa != nil {
			out[name(schema, "test_cohen_kappa")] = *s.CohenKappa
		}
		if s.MicroF1 != nil {
			out[name(schema, "test_micro_f1")] = *s.MicroF1
		}
		if s.MAE != nil {
			out[name(schema, "test_mae")] = *s.MAE
		}
		if s.QWK != nil {
			out[name(schema, "test_qwk")] = *s.QWK
		}
	}
	first := ""
	for _, s := range rec.Schemas {
		if sc, ok := scores[s]; ok {
			add(s, sc)
			if first == "" {
				first = s
			}
		}
	}
	if several && first != "" {
		add("", scores[first])
	}
	// Potato's Training page shows a run's "Held-out score" from accuracy
	// (or train_accuracy): the held-out accuracy, unless the trainer
	// reported an accuracy of its own.
	if _, ok := out["accuracy"]; !ok && first != "" {
		out["accuracy"] = scores[first].Accuracy
	}
	return out
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
