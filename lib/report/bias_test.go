package report

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The stratified test against values worked out by hand: an annotator
// who agreed 10 times in 10 where the test split agreed 8 times in 10
// (Fisher's exact test: C(18,10)/C(20,10) = 90/380); 9 in 10 against the
// same (exactly one half); and two strata of one label each, whose
// counts are each 0 or 1 with chance one half, the sum at least 1 with
// chance three quarters.
func TestStratifiedP(t *testing.T) {
	for _, c := range []struct {
		ss   []stratum
		want float64
	}{
		{[]stratum{{N: 10, X: 10, T: 10, TP: 8}}, 90.0 / 380},
		{[]stratum{{N: 10, X: 9, T: 10, TP: 8}}, 0.5},
		{[]stratum{{N: 1, X: 1, T: 1, TP: 0}, {N: 1, X: 0, T: 1, TP: 1}}, 0.75},
		{[]stratum{{N: 10, X: 10, T: 10, TP: 8}, {N: 10, X: 10, T: 10, TP: 8}}, (90.0 / 380) * (90.0 / 380)},
	} {
		if got := stratifiedP(c.ss); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v: p = %.15f, want %.15f", c.ss, got, c.want)
		}
	}
	if got, want := math.Exp(logPAll([]stratum{{T: 10, TP: 8}}, []float64{10})), 90.0/380; math.Abs(got-want) > 1e-12 {
		t.Errorf("p were all 10 to agree: %g, want %g", got, want)
	}
}

// No outcome gives a p-value below the all-agreeing one (PMin), which
// Tarone's refinement relies on: random tables of one to three strata.
func TestPMinIsSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 2))
	for range 3000 {
		var ss []stratum
		n := make([]float64, 1+rng.IntN(3))
		for i := range n {
			s := stratum{N: 1 + rng.IntN(40), T: 1 + rng.IntN(60)}
			s.X, s.TP = rng.IntN(s.N+1), rng.IntN(s.T+1)
			ss = append(ss, s)
			n[i] = float64(s.N)
		}
		if p, pmin := stratifiedP(ss), math.Exp(logPAll(ss, n)); p < pmin*(1-1e-9) {
			t.Fatalf("%+v: p %g below the all-agreeing %g", ss, p, pmin)
		}
	}
}

func fakeTest(p, pmin float64) *BiasTest {
	return &BiasTest{N: 100, PValue: &p, PMin: pmin, Observed: 1, Expected: 0.9}
}

// The generalized Holm method (two or more false flags held to 5%) with
// Tarone's refinement: a test that could not reach its first level even
// were every label the prelabel is not counted, so the three others are
// corrected as three, at 2 × 5%/3 twice and then 2 × 5%/2, and all
// three are flagged;
// among ten the first two are held to 2 × 5%/10 = 0.01, the third to
// 0.1/9, and the method stops at the first p-value above its level,
// whatever follows.
func TestHolmTarone(t *testing.T) {
	a, b, c, d := fakeTest(0.001, 1e-6), fakeTest(0.02, 1e-5), fakeTest(0.5, 0.3), fakeTest(0.045, 1e-4)
	fam := holm([]*BiasTest{a, b, c, d})
	if fam.Tests != 4 || fam.Counted != 3 || fam.Flagged != 3 || c.Counted || c.Verdict == VerdictFlagged {
		t.Errorf("family %+v; the uncountable test %+v", fam, c)
	}
	for _, x := range []*BiasTest{a, b, d} {
		if x.Verdict != VerdictFlagged {
			t.Errorf("p = %g not flagged: %+v", *x.PValue, x)
		}
	}
	if math.Abs(b.Level-0.1/3) > 1e-15 || d.Level != 0.05 {
		t.Errorf("levels %g and %g, want 2 × 5%%/3 and 2 × 5%%/2", b.Level, d.Level)
	}

	// A test alone is held to 5%, not to 2 × 5%.
	if alone := fakeTest(0.07, 1e-9); holm([]*BiasTest{alone}).Flagged != 0 || alone.Level != 0.05 {
		t.Errorf("a lone p = 0.07: %+v, want not flagged at level 0.05", alone)
	}

	tests := []*BiasTest{fakeTest(0.004, 1e-9), fakeTest(0.009, 1e-9), fakeTest(0.0112, 1e-9), fakeTest(0.0113, 1e-9)}
	for range 6 {
		tests = append(tests, fakeTest(0.5, 1e-9))
	}
	fam = holm(tests)
	if fam.Counted != 10 || fam.Flagged != 2 || tests[0].Verdict != VerdictFlagged || tests[1].Verdict != VerdictFlagged ||
		math.Abs(tests[0].Level-0.01) > 1e-15 || math.Abs(tests[1].Level-0.01) > 1e-15 {
		t.Errorf("family %+v, first %+v, second %+v", fam, tests[0], tests[1])
	}
	for _, x := range tests[2:] {
		if x.Verdict == VerdictFlagged || math.Abs(x.Level-0.1/9) > 1e-15 {
			t.Errorf("p = %g: verdict %q at level %g, want not flagged at %g", *x.PValue, x.Verdict, x.Level, 0.1/9)
		}
	}
}

// The labels needed: for an annotator who agreed every time, the fewest
// whose all-agreeing p-value reaches the level (exact); for one who agreed
// at 0.95 on a model of 0.85, annotators of that many labels at that rate
// are flagged about 80% of the time (simulated, seeded, 400 annotators);
// and against a test split of ten items that agreed nine times, no number
// of labels at 0.95 would tell.
func TestItemsNeeded(t *testing.T) {
	const level = 0.005
	ss := []stratum{{N: 20, X: 20, T: 300, TP: 285}, {N: 10, X: 10, T: 200, TP: 180}}
	need, ok := itemsNeeded(ss, 30, 1, (20*0.95+10*0.9)/30, level)
	if !ok {
		t.Fatal("a copier: no number of labels")
	}
	at := func(m int) float64 {
		return logPAll(ss, []float64{float64(m) * 20 / 30, float64(m) * 10 / 30})
	}
	if at(need) > math.Log(level) || at(need-1) <= math.Log(level) {
		t.Errorf("a copier needs %d labels: log p %g there and %g one fewer, against %g", need, at(need), at(need-1), math.Log(level))
	}

	ss = []stratum{{N: 25, T: 1000, TP: 900}, {N: 15, T: 500, TP: 375}}
	expected := (25*0.9 + 15*0.75) / 40.0
	observed := 0.95
	need, ok = itemsNeeded(ss, 40, observed, expected, level)
	if !ok || need <= 40 {
		t.Fatalf("observed 0.95 against %.3f: %d labels, %v", expected, need, ok)
	}
	c := (observed - expected) / (1 - expected)
	rng := rand.New(rand.NewPCG(34, 3))
	flagged := 0
	const reps = 400
	for range reps {
		var sim []stratum
		for i, s := range ss {
			nl := int(math.Round(float64(need) * float64(s.N) / 40))
			if i == len(ss)-1 {
				nl = need - sim[0].N
			}
			pi := s.rate()
			sim = append(sim, stratum{N: nl, X: binomialDraw(rng, nl, pi+c*(1-pi)), T: s.T, TP: s.TP})
		}
		if stratifiedP(sim) <= level {
			flagged++
		}
	}
	rate := float64(flagged) / reps
	t.Logf("observed 0.95 against %.3f: %d labels, flagged %.3f of the time", expected, need, rate)
	if rate < 0.7 || rate > 0.9 {
		t.Errorf("%d labels at 0.95: flagged %.3f of the time, want about %.1f", need, rate, Power)
	}

	if n, ok := itemsNeeded([]stratum{{N: 20, X: 19, T: 10, TP: 9}}, 20, 0.95, 0.9, level); ok {
		t.Errorf("a test split of 10 items: %d labels would tell 0.95 from 0.9", n)
	}
}
