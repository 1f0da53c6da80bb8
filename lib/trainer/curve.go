package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/curve"
	"potato-training/lib/events"
	"potato-training/lib/trainer/tfidf"
)

// curvePrediction is a line of a curve run's predictions.jsonl: a test
// item's prediction by the model fitted at one point (potato-events(5)).
type curvePrediction struct {
	InstanceID string  `json:"instance_id"`
	SchemaName string  `json:"schema_name"`
	Payload    payload `json:"payload"`
	Confidence float64 `json:"confidence"`
	CurvePoint float64 `json:"curve_point"`
	CurveDraw  int     `json:"curve_draw"`
	NTrain     int     `json:"n_train"`
}

// curveSubset is the first curve.Size(len(train), p) items of train in
// curve.Order: the items point p fits.
func curveSubset(train []example, s bundle.Schema, seed int64, p float64) []example {
	byID := map[string]example{}
	var ids []string
	for _, x := range train {
		if len(docsFor([]example{x}, s)) == 0 {
			continue
		}
		if _, dup := byID[x.id]; !dup {
			ids = append(ids, x.id)
		}
		byID[x.id] = x
	}
	order := curve.Order(seed, ids)
	out := make([]example, 0, curve.Size(len(order), p))
	for _, id := range order[:curve.Size(len(order), p)] {
		out = append(out, byID[id])
	}
	return out
}

// fitTfidfCurve is tfidf-logreg given a curve: for each schema, draw and
// point, a model fitted on the point's items of the train split in the
// draw's order (early stopping on the whole val split, as a run's), whose
// predictions on the test split are written with the point and the draw.
// It keeps no model: a curve run is an analysis, and publishes nothing.
func fitTfidfCurve(ctx context.Context, spec Spec, params Values, splits map[string][]example, ev *events.Writer) error {
	start := time.Now()
	if err := curve.CheckPoints(spec.Curve); err != nil {
		return &fitError{events.ExitBadSpec, events.CodeBadSpec, "curve: " + err.Error()}
	}
	draws := spec.CurveDraws
	if draws == 0 {
		draws = 1
	}
	if err := curve.CheckDraws(draws); err != nil {
		return &fitError{events.ExitBadSpec, events.CodeBadSpec, "curve_draws: " + err.Error()}
	}
	if len(splits["test"]) == 0 {
		return &fitError{events.ExitBadSpec, events.CodeValidationFailed, "curve: the bundle has no test split to score the points on"}
	}
	if err := os.MkdirAll(spec.Workdir, 0o755); err != nil {
		return err
	}
	pf, err := os.Create(filepath.Join(spec.Workdir, "predictions.jsonl"))
	if err != nil {
		return err
	}
	defer pf.Close()
	pw := bufio.NewWriter(pf)
	enc := json.NewEncoder(pw)
	res := events.Result{Status: "success", Metrics: map[string]float64{}, LabelOrder: map[string][]string{},
		PredictionsFile: "predictions.jsonl", ModelVersion: "tfidf-logreg/1"}
	total := float64(len(spec.Schemas) * len(spec.Curve) * draws)
	done := 0.0
	for _, s := range spec.Schemas {
		if err := tfidfSchema(s); err != nil {
			return err
		}
		s = ordinalSchema(s, splits["train"])
		val := docsFor(splits["val"], s)
		for d := range draws {
			for _, p := range spec.Curve {
				if err := fitCurvePoint(ctx, spec, params, s, splits, val, d, p, draws, enc, &res, ev, &done, total); err != nil {
					return err
				}
			}
		}
	}
	if err := pw.Flush(); err != nil {
		return err
	}
	if err := pf.Sync(); err != nil {
		return err
	}
	res.Metrics["fit_seconds"] = time.Since(start).Seconds()
	return ev.Emit(events.ResultEvent(res))
}

// fitCurvePoint fits schema s at point p of draw d and writes its
// predictions of the test split.
func fitCurvePoint(ctx context.Context, spec Spec, params Values, s bundle.Schema, splits map[string][]example, val []tfidf.Doc,
	d int, p float64, draws int, enc *json.Encoder, res *events.Result, ev *events.Writer, done *float64, total float64) error {
	sub := curveSubset(splits["train"], s, curve.DrawSeed(spec.Seed, d), p)
	train := docsFor(sub, s)
	labels := labelSet(s, train)
	at := fmt.Sprintf("curve point %s%%", curve.Format(p))
	if draws > 1 {
		at += fmt.Sprintf(", draw %d", d)
	}
	if distinct := distinctLabels(s, train, labels); len(train) < MinLabelled || distinct < 2 {
		return &fitError{events.ExitBadSpec, events.CodeValidationFailed,
			fmt.Sprintf("schema %s: %s has %d labelled training items with %d distinct labels: tfidf-logreg needs at least %d items and 2 labels; give later --points",
				s.Name, at, len(train), distinct, MinLabelled)}
	}
	_ = ev.Emit(events.Status("fitting", fmt.Sprintf("fitting %s at %s%% of the train split, %d items, draw %d of %d", s.Name, curve.Format(p), len(train), d+1, draws)))
	opt := tfidfOptions(spec, params, s)
	model, err := tfidf.Fit(ctx, train, val, labels, opt, func(e tfidf.Epoch) {
		_ = ev.Emit(events.Progress("curve", *done+float64(e.N)/float64(e.Of), total, -1))
	})
	if err != nil {
		if errors.Is(err, tfidf.ErrTooFewExamples) {
			return &fitError{events.ExitBadSpec, events.CodeValidationFailed, fmt.Sprintf("schema %s: %s: %v", s.Name, at, err)}
		}
		return err
	}
	res.LabelOrder[s.Name] = labelOrder(s, model)
	correct, n := 0, 0
	for _, x := range splits["test"] {
		if err := ctx.Err(); err != nil {
			return err
		}
		label, conf, _ := predict(model, s, x.text)
		if err := enc.Encode(curvePrediction{x.id, s.Name, payload{label, conf}, conf, p, d, len(train)}); err != nil {
			return err
		}
		res.NPredictions++
		if gold, ok := goldLabel(s, x.targets[s.Name]); ok {
			n++
			if gold == label {
				correct++
			}
		}
	}
	*done++
	_ = ev.Emit(events.Progress("curve", *done, total, -1))
	_ = ev.Emit(events.Log("info", fmt.Sprintf("curve: %s at %s%% (%d items), draw %d: test accuracy %.3f on %d items", s.Name, curve.Format(p), len(train), d, float64(correct)/float64(max(n, 1)), n)))
	return nil
}
