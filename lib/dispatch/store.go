package dispatch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
	"potato-training/lib/writeback"
)

// CodeStoreFailed is the error_code of a run whose rows could not be
// written to Potato's store.
const CodeStoreFailed = "store_failed"

// StoreError is a failed write to Potato's store: the SQLite error and the
// store's path.
type StoreError struct {
	Path string
	Err  error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("cannot write Potato's store %s: %v", e.Path, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// withStore opens Potato's store of cfg for fn; any error is a StoreError.
func withStore(cfg *config.Config, fn func(*writeback.Store) error) error {
	path := StorePath(cfg)
	s, err := writeback.OpenStore(path)
	if err != nil {
		return &StoreError{Path: path, Err: err}
	}
	defer s.Close()
	if err := fn(s); err != nil {
		return &StoreError{Path: path, Err: err}
	}
	return nil
}

// potatoStatus is the status Potato's training_runs knows for a state of
// run.json: dispatching is the training process starting (running), and
// fetching is collecting, scoring and writing back (evaluating).
func potatoStatus(state string) string {
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

// recordRun upserts the run row of rec into Potato's store.
func recordRun(cfg *config.Config, root *rundir.Root, rec rundir.Record) error {
	row := runRow(cfg, root, rec)
	return withStore(cfg, func(s *writeback.Store) error { return s.RecordRun(row) })
}

// runRow is rec as Potato writes a run row (FORMATS.md, "Potato's
// store"): kinds a list in schema order, flat metrics under Potato's names,
// the split sizes and digest of the run's bundle.
func runRow(cfg *config.Config, root *rundir.Root, rec rundir.Record) writeback.RunRow {
	dir := root.RunDir(rec.RunID)
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
	row := writeback.RunRow{
		Project: cfg.TaskName, RunID: rec.RunID, Trainer: rec.Trainer, Backend: rec.Backend,
		SchemaNames: rec.Schemas, Kinds: kinds, Status: potatoStatus(rec.State), Trigger: potatoTrigger(rec.Trigger),
		CreatedAt: unix(&rec.CreatedAt), StartedAt: unix(rec.StartedAt), FinishedAt: unix(rec.FinishedAt),
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
	var scores map[string]writeback.SchemaScore
	if raw, ok := rec.Metrics["heldout"]; ok {
		if b, err := json.Marshal(raw); err == nil {
			_ = json.Unmarshal(b, &scores)
		}
	}
	add := func(schema string, s writeback.SchemaScore) {
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

// settleLost ends the runs whose dispatch is gone (killed with SIGKILL, or
// its machine restarted): run.json and Potato's store get the terminal
// state error, error_code dispatch_lost, once (rundir.SettleLost). A store
// that cannot be written is noted in the run's store_error. It also writes
// the end of a finished run that the store refused (recordEnd).
func settleLost(cfg *config.Config, root *rundir.Root) {
	infos, err := root.List()
	if err != nil {
		return
	}
	for _, info := range infos {
		if info.Finished && info.StoreError != "" {
			recordEnd(cfg, root, info.RunID)
			continue
		}
		if !info.Gone {
			continue
		}
		id := info.RunID
		pending := false
		ok, err := root.SettleLost(id, func(rec rundir.Record) error {
			pending = rec.WritebackPending
			return recordRun(cfg, root, rec)
		})
		if ok || err != nil {
			msg := "the dispatch of this run is gone: recorded as error (" + rundir.CodeLost + ")"
			if pending {
				msg += fmt.Sprintf("; its predictions stay in %s: potato-dispatch writeback CONFIG %s applies them to Potato's store", rundir.PredictionsFile, id)
			}
			if err != nil {
				msg = "the dispatch of this run is gone, and its end could not be recorded: " + err.Error()
			}
			appendLog(root, id, msg)
		}
	}
}

// recordEnd writes the end of a finished run into Potato's store, which
// refused it when the run ended (store_error: locked longer than the busy
// timeout, read-only), so that the store stops showing as running a run
// that has ended. A pending run's predictions still wait for
// potato-dispatch writeback.
func recordEnd(cfg *config.Config, root *rundir.Root, id string) {
	end := ""
	err := root.Edit(id, func(rec *rundir.Record, finished bool) error {
		if !finished || rec.StoreError == "" {
			return errNoChange
		}
		if err := recordRun(cfg, root, *rec); err != nil {
			return err
		}
		rec.StoreError, end = "", rec.State+" ("+rec.ErrorCode+")"
		return nil
	})
	if err == nil {
		appendLog(root, id, fmt.Sprintf("the run's end, %s, is now in %s", end, StorePath(cfg)))
	}
}

var errNoChange = errors.New("no change")

// appendLog adds a line to a run's run.log as Run.Logf does, for a run
// that no dispatch holds.
func appendLog(root *rundir.Root, id, msg string) {
	f, err := os.OpenFile(filepath.Join(root.RunDir(id), rundir.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), strings.ReplaceAll(rundir.CleanText(msg), "\n", "\n    "))
}
