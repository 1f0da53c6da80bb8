package dispatch

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// Cancel asks run id to stop: its dispatch sees the cancel file, sends
// SIGTERM to the training process and SIGKILL after grace_seconds. A run
// that is over is refused (rundir.ErrFinished, rundir.ErrGone).
func Cancel(configPath, id string) error {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return err
	}
	root, err := Root(cfg)
	if err != nil {
		return err
	}
	settleLost(cfg, root)
	return root.Cancel(id)
}

// StatusOptions are potato-dispatch status's arguments.
type StatusOptions struct {
	ConfigPath string
	RunID      string
	JSON       bool
	LogLines   int
}

// Detail is the JSON of one run in potato-dispatch status RUN_ID --json.
type Detail struct {
	rundir.Record
	Log []string `json:"log"`
}

// Status prints every run, or one run in detail.
func Status(w io.Writer, opt StatusOptions) error {
	cfg, err := LoadConfig(opt.ConfigPath)
	if err != nil {
		return err
	}
	root, err := Root(cfg)
	if err != nil {
		return err
	}
	settleLost(cfg, root)
	if opt.RunID != "" {
		info, err := root.Read(opt.RunID)
		if err != nil {
			return err
		}
		n := opt.LogLines
		if n == 0 {
			n = 10
		}
		lines, _ := rundir.TailLines(filepath.Join(root.RunDir(opt.RunID), rundir.LogFile), n)
		if lines == nil {
			lines = []string{}
		}
		if opt.JSON {
			return rundir.WriteJSON(w, Detail{Record: info.Record, Log: lines})
		}
		return writeDetail(w, info, lines)
	}
	infos, err := root.List()
	if err != nil {
		return err
	}
	if opt.JSON {
		recs := make([]rundir.Record, 0, len(infos))
		for _, i := range infos {
			recs = append(recs, i.Record)
		}
		return rundir.WriteJSON(w, recs)
	}
	// What trainers and agents wrote (a step, a host) is shown, never
	// acted on by the terminal.
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATE\tTRAINER\tSCHEMAS\tRAN ON\tCREATED\tHELD-OUT\tSTEP")
	now := time.Now()
	for _, i := range infos {
		step := oneLine(i.Step, 60)
		if p := ProgressText(i.Record, now); p != "" {
			step += " [" + p + "]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.RunID, i.State, i.Trainer, strings.Join(i.Schemas, ","),
			i.RanOn, i.CreatedAt.Local().Format("2006-01-02 15:04:05"), heldout(i.Record), step)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = io.WriteString(w, rundir.CleanText(out.String()))
	return err
}

func heldout(r rundir.Record) string {
	if r.Curve != nil {
		return curveColumn(r.Curve)
	}
	if r.Heldout == nil {
		return "-"
	}
	return fmt.Sprintf("acc %.3f", r.Heldout.Accuracy)
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len([]rune(s)) > n {
		return string([]rune(s)[:n-3]) + "..."
	}
	return s
}

func writeDetail(w io.Writer, info rundir.Info, log []string) error {
	r := info.Record
	var b strings.Builder
	field := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-12s %s\n", k+":", v)
		}
	}
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.Local().Format(time.RFC3339)
	}
	field("run", r.RunID)
	field("state", r.State)
	field("step", r.Step)
	field("trainer", r.Trainer)
	field("schemas", strings.Join(r.Schemas, ","))
	field("ran on", r.RanOn)
	field("device", r.Device)
	field("started by", r.Trigger)
	field("created", r.CreatedAt.Local().Format(time.RFC3339))
	field("started", ts(r.StartedAt))
	field("finished", ts(r.FinishedAt))
	field("progress", ProgressText(r, time.Now()))
	if r.Heldout != nil {
		field("held-out", fmt.Sprintf("%s: accuracy %.3f, macro-F1 %.3f%s on %d test items", r.Heldout.Schema, r.Heldout.Accuracy, r.Heldout.MacroF1, r.Heldout.OrdinalText(), r.Heldout.N))
	}
	if r.Writeback != nil {
		field("prelabels", fmt.Sprintf("%d written of %d predictions", r.Writeback["n_written"], r.Writeback["n_read"]))
	}
	for _, name := range slices.Sorted(maps.Keys(r.Promotion)) {
		field("promotion", name+": "+r.Promotion[name].Reason)
	}
	curveDetail(r.Curve, field)
	field("artifacts", r.ArtifactURI)
	field("error", r.Error)
	if r.ErrorCode != "" {
		field("error code", r.ErrorCode)
	}
	field("store", r.StoreError)
	if r.WritebackPending {
		field("pending", "the predictions are not in Potato's store: run potato-dispatch writeback CONFIG "+r.RunID)
	}
	if len(log) > 0 {
		b.WriteString("\nlog:\n")
		for _, l := range log {
			b.WriteString("  " + l + "\n")
		}
	}
	// The log, the step and the error hold what trainers and agents
	// wrote: shown, never acted on by the terminal.
	_, err := io.WriteString(w, rundir.CleanText(b.String()))
	return err
}

// readRun reads run id of the project of configPath, with the config and
// the training directory it is in.
func readRun(configPath, id string) (*config.Config, *rundir.Root, rundir.Info, error) {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return nil, nil, rundir.Info{}, err
	}
	root, err := Root(cfg)
	if err != nil {
		return nil, nil, rundir.Info{}, err
	}
	info, err := root.Read(id)
	return cfg, root, info, err
}

// Summary is one line on how run id ended, for a person who waited for
// it; what the trainer said is shown, never acted on by the terminal.
func Summary(configPath, id string) (string, error) {
	s, err := summary(configPath, id)
	return rundir.CleanText(s), err
}

func summary(configPath, id string) (string, error) {
	cfg, _, info, err := readRun(configPath, id)
	if err != nil {
		return "", err
	}
	r := info.Record
	if r.State != rundir.StateSuccess {
		s := fmt.Sprintf("run %s: %s: %s", id, r.State, r.Error)
		if r.StoreError != "" && r.StoreError != r.Error && !strings.Contains(r.Error, r.StoreError) {
			s += "; and the run's end is not in Potato's store: " + r.StoreError
		}
		if r.WritebackPending {
			s += fmt.Sprintf("; the predictions stay in the run directory: potato-dispatch writeback %s %s applies them", configPath, id)
		}
		return s, nil
	}
	s := fmt.Sprintf("run %s: success", id)
	if h := r.Heldout; h != nil {
		s += fmt.Sprintf("; held-out accuracy %.3f, macro-F1 %.3f%s on %d test items of %s", h.Accuracy, h.MacroF1, h.OrdinalText(), h.N, h.Schema)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Promotion)) {
		if d := r.Promotion[name]; !d.Published {
			s += "; " + name + ": " + d.Reason
		}
	}
	if wb := r.Writeback; wb != nil {
		s += fmt.Sprintf("; %d prelabels written to %s", wb["n_written"], writeback.StorePath(cfg))
		if wb["n_written"] > 0 {
			s += "; " + prelabelsShown
		}
	}
	return s, nil
}
