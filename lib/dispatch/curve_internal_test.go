package dispatch

import (
	"slices"
	"testing"

	"potato-training/lib/curve"
)

// TestPruneCurveRuns: curve runs, which keep no model, neither push the
// successes out of retain_runs nor take the place of the newest model of
// their trainer and schema: with retain_runs 1, the model run s1 stays,
// as the newest success, behind three newer curve runs, which go but for
// the newest.
func TestPruneCurveRuns(t *testing.T) {
	runs := runsOf("s1 success tfidf a", "c1 success tfidf a", "c2 success tfidf a", "c3 success tfidf a")
	for i := 1; i < len(runs); i++ {
		runs[i].Curve = &curve.Curve{Points: []float64{50, 100}}
	}
	c := choosePrune(runs, 1, nil, "c3")
	if got := ids(c.remove); !slices.Equal(got, []string{"c2", "c1"}) {
		t.Errorf("removed %v, want c2 and c1", got)
	}
	if len(c.kept) != 0 {
		t.Errorf("kept %+v beyond retain_runs, want none: s1 is within it, as the newest success", c.kept)
	}
}
