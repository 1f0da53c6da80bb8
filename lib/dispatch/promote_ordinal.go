package dispatch

import (
	"fmt"

	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// decideOrdinal is the gate's decision for an ordinal (likert) schema,
// which it judges by mean absolute error in scale points, lower being
// better (writeback/ordinal_gate.go): without writeback.margin the run is
// published unless in at least 95% of the paired bootstrap's draws its
// MAE is above the published run's; with margin set, when its MAE is at
// most the published run's less margin (in scale points). d has the
// comparison's run, items and bootstrap.
func decideOrdinal(d rundir.Promotion, c writeback.Comparison, other string, rule gateRule) rundir.Promotion {
	d.Metric, d.MAE, d.AgainstMAE = "mae", c.Ours.MAE, c.Theirs.MAE
	var ours, theirs float64
	if c.Ours.MAE != nil && c.Theirs.MAE != nil {
		ours, theirs = *c.Ours.MAE, *c.Theirs.MAE
	}
	b := d.Bootstrap
	noise := fmt.Sprintf(" (paired bootstrap of the MAE: the published run's less this run's %+.3f, 95%% interval %+.3f to %+.3f, worse in %.0f%% of %d draws)",
		b.Diff, b.Low, b.High, 100*b.PWorse, b.Resamples)
	what := func(cmp string) string {
		return fmt.Sprintf("mean absolute error %.2f %s %.2f points of run %s", ours, cmp, theirs, other)
	}
	if rule.set {
		if ours <= theirs-rule.margin+promoteEpsilon {
			d.Published = true
			d.Reason = fmt.Sprintf("published: %s%s on %d test items%s", what("<="), marginText(-rule.margin), c.N, noise)
		} else {
			d.Reason = fmt.Sprintf("not published: %s%s on %d test items%s", what(">"), marginText(-rule.margin), c.N, noise)
		}
		return d
	}
	if b.PWorse >= gateConfidence {
		d.Reason = fmt.Sprintf("not published: %s on %d test items, worse beyond noise%s", what(">"), c.N, noise)
		return d
	}
	d.Published = true
	cmp, within := "<=", ""
	if ours > theirs+promoteEpsilon {
		cmp, within = ">", ", within noise"
	}
	d.Reason = fmt.Sprintf("published: %s on %d test items%s%s", what(cmp), c.N, within, noise)
	return d
}
