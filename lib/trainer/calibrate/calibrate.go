package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"time"

	"potato-training/lib/atomicfile"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// Name is the trainer's name in the registry.
const Name = "decision-calibrate"

// Parameters the local backend fills in: Potato's store and the project
// name its rows are keyed by.
const (
	ParamStore   = "store"
	ParamProject = "project"
)

// ArtifactName is the calibration file in workdir.
const ArtifactName = "calibration.json"

// DefaultTarget is the target precision without params.target_precision.
const DefaultTarget = 0.9

// MinPoints is the fewest labelled predictions a schema is calibrated on.
const MinPoints = 20

// Grid is the thresholds of the curve in the metrics: 0, 0.05, ..., 1.
func Grid() []float64 {
	g := make([]float64, 21)
	for i := range g {
		g[i] = float64(i) / 20
	}
	return g
}

// Input is what the trainer reads from spec.json. The parameters come
// typed and checked, through the trainer's declaration in lib/trainer's
// registry.
type Input struct {
	BundleDir string
	Workdir   string
	Schemas   []bundle.Schema
	// TargetPrecision is params.target_precision, 0 for DefaultTarget.
	TargetPrecision float64
	// Method is params.method: auto ("" too), platt or isotonic.
	Method string
	// RunID is params.run_id: the run whose stored predictions are
	// calibrated, "all" for every run, "" for the newest.
	RunID string
	// Store and Project are params.store and params.project.
	Store, Project string
}

// Error is a failure with its exit code and error code (potato-events(5)).
type Error struct {
	Exit int
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func badSpec(format string, args ...any) error {
	return &Error{events.ExitBadSpec, events.CodeBadSpec, fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return &Error{events.ExitBadSpec, events.CodeValidationFailed, fmt.Sprintf(format, args...)}
}

// SchemaReport is one schema's part of calibration.json.
type SchemaReport struct {
	RunIDs      []string     `json:"run_ids"`
	N           int          `json:"n"`
	NRight      int          `json:"n_right"`
	NNull       int          `json:"n_null_confidence"`
	MinSeen     float64      `json:"lowest_confidence"`
	Calibration Calibration  `json:"calibration"`
	Reached     bool         `json:"target_reached"`
	Chosen      *CurvePoint  `json:"min_confidence,omitempty"`
	Curve       []CurvePoint `json:"curve"`
}

// Report is calibration.json.
type Report struct {
	Format          string                  `json:"format"`
	V               int                     `json:"v"`
	TargetPrecision float64                 `json:"target_precision"`
	Store           string                  `json:"store"`
	Project         string                  `json:"project"`
	Schemas         map[string]SchemaReport `json:"schemas"`
}

// Run calibrates each schema of in and writes events to ev: the result's
// metrics hold SCHEMA/min_confidence (when the target is reached),
// SCHEMA/precision, SCHEMA/empirical_precision, SCHEMA/coverage, SCHEMA/n,
// and the curve as SCHEMA/precision@T and SCHEMA/coverage@T.
func Run(ctx context.Context, in Input, ev *events.Writer) error {
	start := time.Now()
	target := in.TargetPrecision
	if target == 0 {
		target = DefaultTarget
	}
	method := in.Method
	store, project := in.Store, in.Project
	if store == "" || project == "" {
		return badSpec("%s needs params %s and %s (Potato's store and annotation_task_name), which the local backend sets: it reads the annotation server's own files", Name, ParamStore, ParamProject)
	}
	if _, err := os.Stat(store); err != nil {
		return invalid("%s: no stored predictions to calibrate (%v): run a trainer with write-back first", Name, err)
	}
	_ = ev.Emit(events.Status("loading", "reading the human labels and the stored predictions"))
	labels, err := humanLabels(in.BundleDir, in.Schemas)
	if err != nil {
		return err
	}
	db, err := openStore(store)
	if err != nil {
		return &Error{events.ExitUnexpected, events.CodeFitFailed, err.Error()}
	}
	defer db.Close()

	rep := Report{Format: "potato-decision-calibrate", V: 1, TargetPrecision: target, Store: store, Project: project,
		Schemas: map[string]SchemaReport{}}
	res := events.Result{Status: "success", ModelVersion: Name + "/1", Metrics: map[string]float64{},
		LabelOrder: map[string][]string{}}
	for si, s := range in.Schemas {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.Kind != config.KindNominal {
			return invalid("schema %s is %s (%s): %s calibrates radio and select schemas", s.Name, s.Kind, s.AnnotationType, Name)
		}
		runs, err := chooseRuns(db, project, s.Name, in.RunID)
		if err != nil {
			return err
		}
		pts, sr, err := points(ctx, db, project, s.Name, runs, labels[s.Name])
		if err != nil {
			return err
		}
		if len(pts) < MinPoints {
			return invalid("schema %s has %d stored predictions of run %s on items people have labelled: %s needs at least %d (--param run_id=all uses every stored prediction)",
				s.Name, len(pts), runLabel(runs), Name, MinPoints)
		}
		_ = ev.Emit(events.Status("fitting", fmt.Sprintf("calibrating %s on %d predictions", s.Name, len(pts))))
		cal, err := Fit(pts, method)
		if err != nil {
			return err
		}
		sr.Calibration = cal
		if cal.Method == "platt" {
			_ = ev.Emit(events.Log("info", fmt.Sprintf("%s: Platt scaling on %d predictions: P(right) = 1/(1+exp(-(%.4g*c + %.4g)))", s.Name, len(pts), cal.A, cal.B)))
			if cal.A < 0 {
				_ = ev.Emit(events.Log("warning", fmt.Sprintf("%s: higher confidences are right less often: the model's confidence does not rank its predictions", s.Name)))
			}
		} else {
			_ = ev.Emit(events.Log("info", fmt.Sprintf("%s: isotonic regression on %d predictions: %d steps", s.Name, len(pts), len(cal.Blocks))))
		}
		if sr.MinSeen > 0 {
			_ = ev.Emit(events.Log("info", fmt.Sprintf("%s: the lowest stored confidence is %.3g: predictions below the min_confidence of their run were never stored, so the curve starts there", s.Name, sr.MinSeen)))
		}
		sr.Curve = Curve(pts, cal, Grid())
		for i, cp := range sr.Curve {
			key := fmt.Sprintf("%s/%%s@%.2f", s.Name, cp.Threshold)
			if cp.N > 0 {
				res.Metrics[fmt.Sprintf(key, "precision")] = cp.Precision
				_ = ev.Emit(events.Metric("calibration", fmt.Sprintf(key, "precision"), cp.Precision, i))
			}
			res.Metrics[fmt.Sprintf(key, "coverage")] = cp.Coverage
			_ = ev.Emit(events.Metric("calibration", fmt.Sprintf(key, "coverage"), cp.Coverage, i))
		}
		res.Metrics[s.Name+"/n"] = float64(len(pts))
		res.Metrics[s.Name+"/target_precision"] = target
		if best, ok := Threshold(pts, cal, target); ok {
			sr.Reached, sr.Chosen = true, &best
			res.Metrics[s.Name+"/min_confidence"] = best.Threshold
			res.Metrics[s.Name+"/precision"] = best.Precision
			res.Metrics[s.Name+"/empirical_precision"] = best.Empirical
			res.Metrics[s.Name+"/coverage"] = best.Coverage
			res.Metrics[s.Name+"/target_reached"] = 1
			_ = ev.Emit(events.Log("info", fmt.Sprintf("%s: min_confidence %.4g reaches precision %.3f (target %.3g; %.3f of the labelled predictions are right) and keeps %.1f%% of them",
				s.Name, best.Threshold, best.Precision, target, best.Empirical, 100*best.Coverage)))
		} else {
			res.Metrics[s.Name+"/target_reached"] = 0
			_ = ev.Emit(events.Log("warning", fmt.Sprintf("%s: no threshold reaches precision %.3g on these predictions: no min_confidence to suggest", s.Name, target)))
		}
		res.LabelOrder[s.Name] = s.Labels
		rep.Schemas[s.Name] = sr
		_ = ev.Emit(events.Progress("calibrate", float64(si+1), float64(len(in.Schemas)), -1))
	}
	if err := os.MkdirAll(in.Workdir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(in.Workdir, ArtifactName)
	n, err := writeJSON(path, rep)
	if err != nil {
		return err
	}
	_ = ev.Emit(events.Artifact(ArtifactName, n))
	res.Metrics["fit_seconds"] = time.Since(start).Seconds()
	return ev.Emit(events.ResultEvent(res))
}

func runLabel(runs []string) string {
	if runs == nil {
		return "all"
	}
	if len(runs) == 1 {
		return runs[0]
	}
	return fmt.Sprint(runs)
}

// humanLabels reads the targets of the bundle's split files: the labels
// people gave, resolved from the annotation files as the run's bundle was
// built (FORMATS.md, "Annotations").
func humanLabels(dir string, schemas []bundle.Schema) (map[string]map[string]string, error) {
	m, err := bundle.ReadManifest(dir)
	if err != nil {
		return nil, &Error{events.ExitBadSpec, events.CodeBadBundle, err.Error()}
	}
	out := map[string]map[string]string{}
	for _, s := range schemas {
		out[s.Name] = map[string]string{}
	}
	names := make([]string, 0, len(m.Splits))
	for name := range m.Splits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sf := m.Splits[name]
		f, err := bundle.OpenSplit(dir, sf.Path)
		if errors.Is(err, bundle.ErrOutside) {
			return nil, &Error{events.ExitBadSpec, events.CodeBadBundle, fmt.Sprintf("bundle: split %q: path %q leaves the bundle directory", name, sf.Path)}
		} else if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
		line := 0
		for sc.Scan() {
			line++
			var row struct {
				InstanceID string         `json:"instance_id"`
				Targets    map[string]any `json:"targets"`
			}
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				f.Close()
				return nil, &Error{events.ExitBadSpec, events.CodeBadBundle, fmt.Sprintf("%s:%d: %v", sf.Path, line, err)}
			}
			for _, s := range schemas {
				if t, ok := row.Targets[s.Name].(string); ok && t != "" {
					out[s.Name][row.InstanceID] = t
				}
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// openStore opens Potato's store for reading. Potato's server may be
// writing it: a busy timeout waits for its transactions.
func openStore(path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dsn := "file:" + (&url.URL{Path: filepath.ToSlash(abs)}).EscapedPath() + "?_pragma=busy_timeout(5000)"
	// The SQLite driver is linked by the program that runs the worker
	// (potato-agent), not by this package, which every package of
	// lib/trainer's users would then link (lib/writeback, "the driver").
	if err := writeback.HasDriver(); err != nil {
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	db, err := sql.Open(writeback.Driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'training_predictions'`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	if n == 0 {
		db.Close()
		return nil, invalid("%s has no training_predictions table: run a trainer with write-back first", path)
	}
	return db, nil
}

// chooseRuns is the runs whose stored predictions are calibrated: the one
// named, every run for "all" (nil), or by default the run that wrote the
// schema's newest row.
func chooseRuns(db *sql.DB, project, schema, want string) ([]string, error) {
	switch want {
	case "all":
		return nil, nil
	case "":
		var id sql.NullString
		err := db.QueryRow(`SELECT run_id FROM training_predictions WHERE project = ? AND schema_name = ?
			ORDER BY created_at DESC LIMIT 1`, project, schema).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) || err == nil && !id.Valid {
			return nil, invalid("no stored predictions for schema %s of project %q: run a trainer with write-back first", schema, project)
		}
		if err != nil {
			return nil, err
		}
		return []string{id.String}, nil
	}
	return []string{want}, nil
}

// points pairs the stored predictions of runs (nil: every run) with the
// human labels.
func points(ctx context.Context, db *sql.DB, project, schema string, runs []string, human map[string]string) ([]Point, SchemaReport, error) {
	q := `SELECT instance_id, run_id, payload, confidence FROM training_predictions WHERE project = ? AND schema_name = ?`
	args := []any{project, schema}
	if runs != nil {
		q += ` AND run_id = ?`
		args = append(args, runs[0])
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, SchemaReport{}, err
	}
	defer rows.Close()
	sr := SchemaReport{RunIDs: runs, MinSeen: math.Inf(1)}
	seen := map[string]bool{}
	var pts []Point
	for rows.Next() {
		var id string
		var run, payload sql.NullString
		var conf sql.NullFloat64
		if err := rows.Scan(&id, &run, &payload, &conf); err != nil {
			return nil, sr, err
		}
		gold, ok := human[id]
		if !ok {
			continue
		}
		if !conf.Valid {
			sr.NNull++
			continue
		}
		var pl struct {
			Label string `json:"label"`
		}
		if payload.Valid {
			_ = json.Unmarshal([]byte(payload.String), &pl)
		}
		right := pl.Label == gold
		pts = append(pts, Point{Confidence: conf.Float64, Correct: right})
		if right {
			sr.NRight++
		}
		sr.MinSeen = min(sr.MinSeen, conf.Float64)
		if run.Valid && !seen[run.String] {
			seen[run.String] = true
			if runs == nil {
				sr.RunIDs = append(sr.RunIDs, run.String)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, sr, err
	}
	sort.Strings(sr.RunIDs)
	sr.N = len(pts)
	if len(pts) == 0 {
		sr.MinSeen = 0
	}
	return pts, sr, nil
}

// writeJSON writes v to path by atomicfile.WriteFile and returns its
// size; NaN (a curve point with no prediction) is written as null.
func writeJSON(path string, v Report) (int64, error) {
	var b bytes.Buffer
	if err := rundir.WriteJSON(&b, nanToNull(v)); err != nil {
		return 0, err
	}
	if err := atomicfile.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return 0, err
	}
	return int64(b.Len()), nil
}

// nanToNull turns the report into plain JSON values with NaN as nil.
func nanToNull(v Report) any {
	type point struct {
		Threshold float64  `json:"threshold"`
		Precision *float64 `json:"precision"`
		Empirical *float64 `json:"empirical_precision"`
		Coverage  float64  `json:"coverage"`
		N         int      `json:"n"`
	}
	num := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	type schema struct {
		SchemaReport
		Curve []point `json:"curve"`
	}
	out := struct {
		Report
		Schemas map[string]schema `json:"schemas"`
	}{Report: v, Schemas: map[string]schema{}}
	for name, sr := range v.Schemas {
		s := schema{SchemaReport: sr}
		for _, cp := range sr.Curve {
			s.Curve = append(s.Curve, point{cp.Threshold, num(cp.Precision), num(cp.Empirical), cp.Coverage, cp.N})
		}
		out.Schemas[name] = s
	}
	return out
}
