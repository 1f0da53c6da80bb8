package report

import (
	"maps"
	"math"
	"slices"
	"sort"

	"potato-training/lib/config"
)

// The automation-bias test: its level, the power its calculation of
// labels needed aims at, and the most labels that calculation looks at.
const (
	Alpha          = 0.05
	Power          = 0.8
	MaxItemsNeeded = 1000000
)

// BiasRule is how the report decides that an annotator agrees with the
// prelabels more than a careful annotator would; the report prints it and
// potato-dispatch(1) states it.
const BiasRule = `An annotator is flagged when their labels agree with the prelabels significantly more often ` +
	`than a careful annotator's would. A careful annotator labels as the people who labelled the run's test split ` +
	`did, before any prelabel of the run existed: on an item whose prelabel is label L they agree with it as often as ` +
	`the test split's labels agreed with the model's predictions of L (the held-out precision of L; for a multiselect ` +
	`schema, the share of test items whose whole set the model predicted; for a run scored before per-label figures were ` +
	`kept, its held-out accuracy). That counts the items where both are right and those where both are wrong the same way. ` +
	`The expected agreement is the mean of those shares over the annotator's labels. ` +
	`The test is exact and one-sided: per prelabel label, Fisher's exact test of the annotator's labels against the test ` +
	`split's, combined over the labels (the exact stratified test of their total agreements). Its p-value is the chance ` +
	`of agreeing at least so often for an annotator no different from the test split's labellers, with the test split's ` +
	`own size in it: a small test split leaves the model's accuracy uncertain, and the test then needs more labels. ` +
	`Labels whose prelabel's label the model never predicted on the test split are not tested. ` +
	`The p-values of a report (each annotator in each schema, and over all schemas for one with tested labels in several) ` +
	`are corrected together by the generalized Holm step-down method (Lehmann and Romano), counting only the tests that ` +
	`could be significant (Tarone's refinement: an annotator with too few labels to be significant even were every one ` +
	`the prelabel is not counted), so that a report flags two or more careful annotators with a chance of at most 5%, ` +
	`and one with a chance of at most 10%: of m tests, the two smallest p-values are held to 2 × 5%/m and the i-th after ` +
	`them to 2 × 5%/(m+2-i), never above 5%. ` +
	`For an annotator not flagged whose agreement is above the expected, the report gives how many labels would flag ` +
	`agreement at their observed rate 80% of the time, at the level the correction sets for the first of its tests ` +
	`(exact for an annotator who agreed every time, else a normal approximation). ` +
	`Agreement above the expected is consistent with accepting prelabels unchecked, not proof of it: the annotator may ` +
	`label better than the test split's labellers, or items easier than the test split's. Items harder than the test ` +
	`split's (chosen because the model was unsure of them) make the expected agreement too high, which hides copying ` +
	`rather than inventing it.`

// The verdicts of a BiasTest.
const (
	VerdictFlagged     = "flagged"
	VerdictNotAbove    = "not_above_expected"
	VerdictCannotTell  = "cannot_tell"
	VerdictNoReference = "no_reference"
)

// BiasTest is one annotator's automation-bias test, in one schema or over
// all schemas (BiasRule).
type BiasTest struct {
	// N is the labels tested, Agreed those equal to the prelabel;
	// Observed is Agreed/N and Expected a careful annotator's agreement
	// on the same items.
	N        int     `json:"n"`
	Agreed   int     `json:"agreed"`
	Observed float64 `json:"observed"`
	Expected float64 `json:"expected"`
	// NNoReference is the labels left out as the model never predicted
	// their prelabel's label on the test split.
	NNoReference int `json:"n_no_reference"`
	// PValue is the test's p-value; nil when no label was tested.
	PValue *float64 `json:"p_value"`
	// PMin is the p-value were every tested label the prelabel.
	PMin float64 `json:"p_min"`
	// Counted: the test could be significant at the level the correction
	// sets, so it is one of the report's Tests.
	Counted bool `json:"counted"`
	// Level is the level Holm's method held PValue to: the one it met when
	// flagged, the one where the method stopped when not.
	Level float64 `json:"level,omitempty"`
	// Verdict is flagged, not_above_expected, cannot_tell or
	// no_reference.
	Verdict string `json:"verdict"`
	// ItemsNeeded, for cannot_tell: the labels in all that would flag
	// agreement at the Observed rate with 80% power at PowerLevel;
	// MoreItems is ItemsNeeded-N. Nil when no number up to MaxItemsNeeded
	// would, the test split being too small to tell the rates apart.
	ItemsNeeded *int    `json:"items_needed,omitempty"`
	MoreItems   *int    `json:"more_items,omitempty"`
	PowerLevel  float64 `json:"power_level,omitempty"`

	strata []stratum
}

// BiasFamily says how a report's automation-bias tests were corrected.
type BiasFamily struct {
	Alpha      float64 `json:"alpha"`
	Correction string  `json:"correction"`
	// Tests is the tests with a p-value; Counted those that could be
	// significant, which Holm's method corrects for.
	Tests   int `json:"tests"`
	Counted int `json:"counted"`
	Flagged int `json:"flagged"`
}

// reference is a schema's held-out agreement per prelabel label: T test
// items predicted it, TP of them labelled it. A run scored without
// per-label figures has one entry for every label, under "".
type reference struct {
	byLabel bool
	counts  map[string][2]int
}

// referenceOf reads the held-out figures a schema's test needs; nil when
// the run recorded none with its count of test items.
func referenceOf(h *Heldout, kind config.Kind) *reference {
	if h == nil || h.N == 0 {
		return nil
	}
	if kind == config.KindNominal && len(h.Precision) > 0 {
		r := &reference{byLabel: true, counts: map[string][2]int{}}
		for _, p := range h.Precision {
			if p.Predicted > 0 {
				r.counts[p.Label] = [2]int{p.Predicted, p.Agreed}
			}
		}
		return r
	}
	// A multiselect prelabel is accepted as a whole set, which per-label
	// figures do not tell: its reference is the subset accuracy.
	return &reference{counts: map[string][2]int{"": {h.N, int(math.Round(h.Accuracy * float64(h.N)))}}}
}

// key is the stratum of a prelabel.
func (r *reference) key(prelabel []string) (string, bool) {
	k := ""
	if r.byLabel {
		k = prelabel[0]
	}
	_, ok := r.counts[k]
	return k, ok
}

// strataBuilder gathers an annotator's labels into strata.
type strataBuilder struct {
	m     map[string]*stratum
	noRef int
}

func (b *strataBuilder) add(key string, ref [2]int, agreed bool) {
	if b.m == nil {
		b.m = map[string]*stratum{}
	}
	s := b.m[key]
	if s == nil {
		s = &stratum{T: ref[0], TP: ref[1]}
		b.m[key] = s
	}
	s.N++
	if agreed {
		s.X++
	}
}

// test is the builder's test, its p-value computed; the correction comes
// later.
func (b *strataBuilder) test() *BiasTest {
	bt := &BiasTest{NNoReference: b.noRef, Verdict: VerdictNoReference, PMin: 1}
	var expected float64
	for _, k := range slices.Sorted(maps.Keys(b.m)) {
		s := *b.m[k]
		bt.strata = append(bt.strata, s)
		bt.N += s.N
		bt.Agreed += s.X
		expected += float64(s.N) * s.rate()
	}
	if bt.N == 0 {
		return bt
	}
	bt.Observed = float64(bt.Agreed) / float64(bt.N)
	bt.Expected = expected / float64(bt.N)
	n := make([]float64, len(bt.strata))
	for i, s := range bt.strata {
		n[i] = float64(s.N)
	}
	bt.PMin = math.Exp(logPAll(bt.strata, n))
	// The all-agreeing outcome is the test's most extreme, so no p-value
	// is below PMin; the max keeps Tarone's refinement sound were rounding
	// to say otherwise.
	p := math.Max(stratifiedP(bt.strata), bt.PMin)
	bt.PValue = &p
	return bt
}

// correct applies Tarone's refinement and Holm's method to a report's
// tests at Alpha, sets each test's verdict, and for those that cannot
// tell, the labels that would.
func correct(tests []*BiasTest) BiasFamily {
	fam := holm(tests)
	for _, t := range tests {
		if t.PValue == nil || t.Verdict == VerdictFlagged {
			continue
		}
		if t.Observed <= t.Expected {
			t.Verdict = VerdictNotAbove
			continue
		}
		t.Verdict = VerdictCannotTell
		// The level Holm's method would first hold it to, in a family
		// with it counted.
		m := fam.Counted
		if !t.Counted {
			m++
		}
		t.PowerLevel = holmLevel(1, m)
		if need, ok := itemsNeeded(t.strata, t.N, t.Observed, t.Expected, t.PowerLevel); ok {
			more := need - t.N
			t.ItemsNeeded, t.MoreItems = &need, &more
		}
	}
	return fam
}

// holm flags the tests that the generalized Holm method (Lehmann and
// Romano's step-down for the k-familywise error, k = FalseFlagsHeld + 1)
// rejects at Alpha, among those Tarone's refinement counts: the chance
// that a report flags more than FalseFlagsHeld careful annotators is at
// most Alpha. The i-th smallest of m p-values is held to k·Alpha/m for
// i ≤ k and k·Alpha/(m+k−i) after, never above Alpha.
func holm(tests []*BiasTest) BiasFamily {
	fam := BiasFamily{Alpha: Alpha, Correction: correctionWords}
	var withP []*BiasTest
	for _, t := range tests {
		if t.PValue != nil {
			withP = append(withP, t)
		}
	}
	fam.Tests = len(withP)
	// Tarone: the smallest m such that at most m tests could reach the
	// first level of a family of m; those are the family.
	m := 1
	for ; m < len(withP); m++ {
		if countBelow(withP, holmLevel(1, m)) <= m {
			break
		}
	}
	var family []*BiasTest
	for _, t := range withP {
		if t.PMin <= holmLevel(1, m) {
			t.Counted = true
			family = append(family, t)
		}
	}
	fam.Counted = len(family)
	sort.SliceStable(family, func(i, j int) bool { return *family[i].PValue < *family[j].PValue })
	stop := -1.0
	for i, t := range family {
		level := holmLevel(i+1, len(family))
		if stop < 0 && *t.PValue <= level {
			t.Level, t.Verdict = level, VerdictFlagged
			fam.Flagged++
			continue
		}
		if stop < 0 {
			stop = level
		}
		t.Level = stop
	}
	return fam
}

// FalseFlagsHeld is how many careful annotators a report may flag before
// its error is counted: the generalized Holm method holds the chance of
// flagging more than this many to Alpha. With 1, a report of ten careful
// annotators flags two or more at most 5% of the time; one alone may be
// flagged more often (potato-dispatch(1) gives the simulated rates).
const FalseFlagsHeld = 1

// correctionWords names the correction in the report.
const correctionWords = "generalized Holm (at most 5% chance of flagging two or more careful annotators), counting only tests that could be significant (Tarone)"

// holmLevel is the level of the i-th smallest of m p-values (1-based).
func holmLevel(i, m int) float64 {
	k := FalseFlagsHeld + 1
	var l float64
	if i <= k {
		l = float64(k) * Alpha / float64(m)
	} else {
		l = float64(k) * Alpha / float64(m+k-i)
	}
	return math.Min(l, Alpha)
}

func countBelow(tests []*BiasTest, level float64) int {
	n := 0
	for _, t := range tests {
		if t.PMin <= level {
			n++
		}
	}
	return n
}

// itemsNeeded is the fewest labels, spread over the strata as the n there
// are, that would flag an annotator agreeing at the observed rate with
// probability Power at level: an annotator who misses the same share of
// the prelabels a careful annotator disagrees with in every stratum. For
// one who agreed every time it is exact: the fewest labels whose
// all-agreeing p-value reaches level. It is more than n (n did not reach
// it), and false when no number up to MaxItemsNeeded would.
func itemsNeeded(ss []stratum, n int, observed, expected, level float64) (int, bool) {
	share := make([]float64, len(ss))
	for i, s := range ss {
		share[i] = float64(s.N) / float64(n)
	}
	c := (observed - expected) / (1 - expected)
	enough := func(m int) bool {
		if observed == 1 {
			nn := make([]float64, len(ss))
			for i := range ss {
				nn[i] = float64(m) * share[i]
			}
			return logPAll(ss, nn) <= math.Log(level)
		}
		return approxPower(ss, share, float64(m), c, level) >= Power
	}
	lo, hi := n, 2*n+1
	for !enough(hi) {
		if hi >= MaxItemsNeeded {
			return 0, false
		}
		lo, hi = hi, min(2*hi, MaxItemsNeeded)
	}
	// enough(lo) is false or lo is n; find the first m in (lo, hi] that
	// is enough.
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if enough(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}
