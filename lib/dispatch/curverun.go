package dispatch

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/curve"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
	"potato-training/lib/writeback"
)

// CodeCurveIncomplete is the error_code of a curve run whose trainer wrote
// no predictions for a point: a trainer that ignores spec.json's curve,
// whose one model must not pass for a flat curve.
const CodeCurveIncomplete = "curve_incomplete"

// checkCurve refuses a curve that the trainer cannot fit, before the run
// is recorded, and sets its draws to the trainer's default where none
// were asked for. An exec: program may fit one: its predictions say.
func checkCurve(opt *Options) error {
	if opt.Curve == nil {
		return nil
	}
	if err := curve.CheckPoints(opt.Curve); err != nil {
		return usagef("--points: %v", err)
	}
	if opt.CurveDraws != 0 {
		if err := curve.CheckDraws(opt.CurveDraws); err != nil {
			return usagef("--draws: %v", err)
		}
	}
	if trainer.IsExec(opt.Trainer) {
		if opt.CurveDraws == 0 {
			opt.CurveDraws = curve.DefaultDraws
		}
		return nil
	}
	info, _ := trainer.Lookup(opt.Trainer)
	switch {
	case info.NoPredictions:
		return usagef("trainer %s writes no predictions: it has no learning curve; the trainers that fit one are %s, or an exec: program that follows potato-events(5)", opt.Trainer, curveTrainers())
	case !info.Curve:
		return usagef("trainer %s does not fit learning curves; the trainers that do are %s", opt.Trainer, curveTrainers())
	}
	if opt.CurveDraws == 0 {
		opt.CurveDraws = max(info.CurveDraws, 1)
	}
	return nil
}

func curveTrainers() string {
	var names []string
	for _, i := range trainer.Runnable() {
		if i.Curve {
			names = append(names, i.Name)
		}
	}
	return strings.Join(names, ", ")
}

// newCurve is the curve a run's record starts with: what it asks for.
func newCurve(cfg *config.Config, points []float64, draws int) *curve.Curve {
	if points == nil {
		return nil
	}
	return &curve.Curve{Points: points, Seed: int64(cfg.Training.SplitSeed), Draws: max(draws, 1), Metric: "macro_f1", Epsilon: curve.Epsilon}
}

// curvePhase scores a curve run's points on the test split, as the
// held-out score of a run is scored, judges them and records the curve.
// A curve run publishes no prelabels: it is an analysis.
func (d *dispatcher) curvePhase(m bundle.Manifest) *ending {
	rec := d.run.Record()
	pred := d.run.Path(rundir.PredictionsFile)
	if _, err := os.Stat(pred); err != nil {
		return failed(fmt.Sprintf("the trainer reported a result but no predictions file: %v", err), "curve")
	}
	c, warnings, err := writeback.JudgeCurve(d.run.Path(rundir.BundleDir), pred, m.Schemas, *rec.Curve, rec.Trainer)
	for _, w := range warnings {
		d.logf("warning: %s", w)
	}
	if err != nil {
		var ie *writeback.IncompleteCurveError
		if errors.As(err, &ie) {
			return failed(err.Error(), CodeCurveIncomplete)
		}
		return failed("curve: "+err.Error(), "curve")
	}
	d.set(func(r *rundir.Record) { r.Curve = &c })
	for _, s := range c.Schemas {
		for _, p := range s.Points {
			d.logf("curve of %s at %s%% of the train split (%d items): accuracy %.3f, macro-F1 %.3f on %d test items",
				s.Schema, curve.Format(p.Percent), p.NTrain, p.Accuracy, p.MacroF1, s.NTest)
		}
		d.logf("%s", s.Sentence)
		for _, l := range s.Labels {
			d.logf("%s: %s", s.Schema, l.Sentence)
		}
	}
	d.logf("a learning curve publishes no prelabels: Potato's store keeps those it had")
	return succeeded
}

// CurveOf reads the curve of a finished curve run.
func CurveOf(configPath, id string) (rundir.Record, error) {
	_, _, info, err := readRun(configPath, id)
	if err != nil {
		return rundir.Record{}, err
	}
	if info.Curve == nil {
		return info.Record, usagef("run %s is not a learning curve's", id)
	}
	return info.Record, nil
}

// curveDetail adds a curve run's lines to status's detail: its points,
// then each schema's sentence.
func curveDetail(c *curve.Curve, field func(k, v string)) {
	if c == nil {
		return
	}
	ps := make([]string, len(c.Points))
	for i, p := range c.Points {
		ps[i] = curve.Format(p)
	}
	field("curve", "a learning curve at "+strings.Join(ps, ",")+"% of the train split; it publishes no prelabels")
	for _, s := range c.Schemas {
		field("curve", s.Sentence)
	}
}

// curveColumn is status's HELD-OUT column for a curve run, which has no
// held-out score: "curve", then each schema's verdict once it is scored,
// "curve rising/flat".
func curveColumn(c *curve.Curve) string {
	var vs []string
	for _, s := range c.Schemas {
		vs = append(vs, s.Verdict)
	}
	if len(vs) == 0 {
		return "curve"
	}
	return "curve " + strings.Join(vs, "/")
}
