// The sentences of a judged curve: its span, its noise, its verdict in
// words, and the advice that follows from it.

package curve

import (
	"fmt"
	"strings"
)

// spanText names the span of the curve: "25% to 100% of the train split
// (12 to 48 items)".
func spanText(ps []Point) string {
	first, last := ps[0], ps[len(ps)-1]
	return fmt.Sprintf("%s%% to %s%% of the train split (%d to %d items)", Format(first.Percent), Format(last.Percent), first.NTrain, last.NTrain)
}

// noiseText gives the trend's two standard errors: "s.e. 0.010 from the
// 392 test items, 0.011 from the 3 draws".
func noiseText(t Trend, nTest int, of string, draws int) string {
	d := fmt.Sprintf("%.3f from the %d draws", t.SEDraws, draws)
	if draws == 1 {
		d = fmt.Sprintf("%.3f from the one draw's scatter", t.SEDraws)
	}
	return fmt.Sprintf("s.e. %.3f from the %d test items%s, %s", t.SETest, nTest, of, d)
}

func sentence(metric, verdict string, t Trend, p parts, span string, nTest int, of string, draws int, items, more int) string {
	per := fmt.Sprintf("%+.3f per doubling of the training items", t.PerDoubling)
	switch {
	case p.sxx == 0:
		return fmt.Sprintf("%s over %s: every point fitted as many items, so there is no trend to judge; give points further apart", metric, span)
	case nTest < MinTest:
		return fmt.Sprintf("%s %s over %s, scored on %d test items%s: too few to judge a curve, since one item moves it by more than ±%.2f; it would need at least %d",
			metric, per, span, nTest, of, Epsilon, items)
	case !p.measured:
		return fmt.Sprintf("%s %s over %s: one draw of two points cannot measure how much the choice of training items moves it; fit %d draws or more points",
			metric, per, span, more)
	}
	noise := noiseText(t, nTest, of, draws)
	switch verdict {
	case Rising:
		return fmt.Sprintf("%s rises %s over %s, 95%% interval %+.3f to %+.3f (%s)", metric, per, span, t.Low, t.High, noise)
	case Falling:
		return fmt.Sprintf("%s falls %s over %s, 95%% interval %+.3f to %+.3f, beyond the noise of both the test items and the draws (%s)", metric, per, span, t.Low, t.High, noise)
	case Flat:
		return fmt.Sprintf("%s is flat over %s: %s, 90%% interval %+.3f to %+.3f, within ±%.2f (%s)", metric, span, per, t.Low90, t.High90, Epsilon, noise)
	}
	out := fmt.Sprintf("%s changes %s over %s, 95%% interval %+.3f to %+.3f (%s): it cannot tell a rise from a flat curve (within ±%.2f)",
		metric, per, span, t.Low, t.High, noise, Epsilon)
	var ways []string
	if items > 0 {
		ways = append(ways, fmt.Sprintf("about %d labelled test items%s (it has %d)", items, of, nTest))
	}
	if more > 0 {
		ways = append(ways, fmt.Sprintf("%d draws", more))
	}
	if len(ways) > 0 {
		out += fmt.Sprintf("; were it to stay at %+.3f, %s would tell", t.PerDoubling, strings.Join(ways, " or "))
	}
	return out
}

func advice(verdict string) string {
	switch verdict {
	case Rising:
		return "more annotations of this kind will likely help"
	case Falling:
		return "more of the same will not help; look for inconsistent labels"
	case Unclear:
		return "the curve cannot tell whether more annotations would help"
	}
	return "more of the same will not help"
}
