// Package curve implements learning curves as potato-dispatch(1), CURVE,
// describes them: the points, the nested subsets of the train split that
// a trainer fits at each (spec.json's curve, potato-events(5)), and the
// judgement of their scores on the test split, as run.json keeps it
// (potato-rundir(5)).
package curve

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// DefaultPoints are the points of --points when it is left out.
const DefaultPoints = "25,50,75,100"

// MaxPoints is the most points a curve may have: each is a fit.
const MaxPoints = 20

// DefaultDraws is how many nested draws a curve asks of a trainer that
// names no number of its own; MaxDraws is the most it may ask: each draw
// is a fit at every point.
const (
	DefaultDraws = 3
	MaxDraws     = 20
)

// CheckDraws refuses a number of draws outside 1 to MaxDraws.
func CheckDraws(n int) error {
	if n < 1 || n > MaxDraws {
		return fmt.Errorf("a curve has 1 to %d draws, not %d", MaxDraws, n)
	}
	return nil
}

// DrawSeed is the seed whose Order draw d of a curve takes: seed + d.
// Draw 0 is the order of the seed itself, so a trainer that fits one
// draw fits draw 0.
func DrawSeed(seed int64, d int) int64 { return seed + int64(d) }

// ParsePoints reads a comma-separated list of percentages of the train
// split, such as "25,50,75,100".
func ParsePoints(s string) ([]float64, error) {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%"))
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) {
			return nil, fmt.Errorf("point %q is not a number: give percentages of the train split, such as %s", f, DefaultPoints)
		}
		out = append(out, p)
	}
	return out, CheckPoints(out)
}

// CheckPoints refuses points that are not a curve: at least 2 and at most
// MaxPoints, each above 0 and at most 100, rising.
func CheckPoints(ps []float64) error {
	if len(ps) < 2 || len(ps) > MaxPoints {
		return fmt.Errorf("a curve has 2 to %d points, not %d", MaxPoints, len(ps))
	}
	for i, p := range ps {
		if !(p > 0 && p <= 100) {
			return fmt.Errorf("point %s is outside (0, 100]: points are percentages of the train split", Format(p))
		}
		if i > 0 && p <= ps[i-1] {
			return fmt.Errorf("points must rise: %s after %s", Format(p), Format(ps[i-1]))
		}
	}
	return nil
}

// Format writes a point as the man pages and the report do: 25, 12.5.
func Format(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// Order is the order in which a curve takes a schema's labelled training
// items: by the hex SHA-256 of "SEED/INSTANCE_ID", so that any trainer, in
// any language, and the dispatch that scores it, take the same items at
// each point, and each point's items hold the previous point's.
func Order(seed int64, ids []string) []string {
	type keyed struct{ key, id string }
	ks := make([]keyed, len(ids))
	for i, id := range ids {
		sum := sha256.Sum256([]byte(strconv.FormatInt(seed, 10) + "/" + id))
		ks[i] = keyed{hex.EncodeToString(sum[:]), id}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.key+a.id, b.key+b.id) })
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.id
	}
	return out
}

// Size is how many of n labelled training items point p takes: p% of n,
// rounded half up, at least 1 and at most n.
func Size(n int, p float64) int {
	k := int(math.Floor(p*float64(n)/100 + 0.5))
	return max(1, min(k, n))
}
