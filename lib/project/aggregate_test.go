package project

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"potato-training/lib/config"
)

// fromVotes builds Annotations from {item: {annotator: target}} for one
// schema, annotators in the order given.
func fromVotes(s config.Scheme, annotators []string, votes map[string]map[string]any) *Annotations {
	a := &Annotations{Schemes: []config.Scheme{s}, votes: map[string]map[string][]Vote{}}
	for _, id := range annotators {
		a.Annotators = append(a.Annotators, Annotator{ID: id, Dir: id})
	}
	for item, byAnnotator := range votes {
		for j, id := range annotators {
			if t, ok := byAnnotator[id]; ok {
				if a.votes[item] == nil {
					a.votes[item] = map[string][]Vote{}
				}
				a.votes[item][s.Name] = append(a.votes[item][s.Name], Vote{Annotator: j, Target: t})
			}
		}
	}
	return a
}

func resolve(t *testing.T, a *Annotations, method string) *Resolution {
	t.Helper()
	r, err := a.Resolve(method)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMajorityOnTestdata(t *testing.T) {
	r := resolve(t, readTestAnnotations(t), Majority)
	for _, tc := range []struct {
		item, schema string
		want         any
	}{
		{"i1", "sentiment", "positive"},
		{"i2", "sentiment", "negative"}, // 1-1: alice (ann_a) is seen first
		{"i3", "sentiment", "negative"}, // alice chose two labels, so only ann_b votes
		{"i4", "sentiment", "neutral"},
		{"i1", "aspects", []string{"acting", "plot"}},
		{"i1", "rating", 4.0},
		{"i2", "score", 0.0},
		{"i3", "toxic", []Span{
			{Schema: "toxic", Name: "threat", Title: "Threat", Start: 0, End: 4, ID: "s1"},
			{Schema: "toxic", Name: "insult", Title: "Insult", Start: 10, End: 15, ID: "s2"},
		}},
	} {
		got, ok := r.Target(tc.item, tc.schema)
		if !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s = %#v (%v), want %#v", tc.item, tc.schema, got, ok, tc.want)
		}
	}
	if _, ok := r.Target("i2", "aspects"); ok {
		t.Error("i2 aspects has a target, want none: nothing was chosen")
	}
	if r.Targets("i5") != nil {
		t.Errorf("i5 targets = %v, want none", r.Targets("i5"))
	}
	st := r.Stats
	if st.Method != Majority || st.Annotators != 2 || st.Items != 4 {
		t.Errorf("stats = %+v", st)
	}
	if s := st.Schemas["sentiment"]; s.Method != "majority" || s.Items != 4 || s.Disputed != 1 {
		t.Errorf("sentiment stats = %+v, want 4 items, 1 disputed", s)
	}
	if s := st.Schemas["toxic"]; s.Items != 1 || s.Disputed != 1 {
		t.Errorf("toxic stats = %+v", s)
	}
	if _, ok := st.Schemas["comment"]; ok {
		t.Error("a text schema has stats")
	}
}

func TestMajorityTieGoesToFirstAnnotator(t *testing.T) {
	s := scheme("q", "radio", "a", "b", "c")
	a := fromVotes(s, []string{"zed", "amy", "bo", "cy"}, map[string]map[string]any{
		"x": {"zed": "c", "amy": "b", "bo": "b", "cy": "c"}, // 2-2: zed is first
		"y": {"amy": "a", "bo": "b", "cy": "b"},
		"z": {"cy": "a", "bo": "c"}, // bo comes before cy
	})
	r := resolve(t, a, Majority)
	for item, want := range map[string]string{"x": "c", "y": "b", "z": "c"} {
		if got, _ := r.Target(item, "q"); got != want {
			t.Errorf("%s = %v, want %s", item, got, want)
		}
	}
}

func TestResolveMethods(t *testing.T) {
	a := readTestAnnotations(t)
	if _, err := a.Resolve("mean"); err == nil {
		t.Error(`Resolve("mean") succeeded`)
	}
	r := resolve(t, a, "")
	if r.Stats.Method != Consensus {
		t.Errorf(`Resolve("").Stats.Method = %q, want consensus`, r.Stats.Method)
	}
	// Consensus is Dawid-Skene for the nominal schema only.
	want := map[string]string{"sentiment": "dawid-skene", "aspects": "majority", "rating": "majority", "score": "majority", "toxic": "majority"}
	for schema, method := range want {
		if got := r.Stats.Schemas[schema].Method; got != method {
			t.Errorf("%s resolved by %q, want %q", schema, got, method)
		}
	}
	if got, _ := r.Target("i1", "sentiment"); got != "positive" {
		t.Errorf("i1 sentiment = %v", got)
	}
}

func TestConsensusSingleAnnotatorIsMajority(t *testing.T) {
	s := scheme("q", "radio", "a", "b")
	a := fromVotes(s, []string{"solo", "other"}, map[string]map[string]any{
		"x": {"solo": "a"}, "y": {"solo": "b"},
	})
	r := resolve(t, a, Consensus)
	if st := r.Stats.Schemas["q"]; st.Method != "majority" {
		t.Errorf("one voter: resolved by %q, want majority", st.Method)
	}
}

func TestRealExamplesResolve(t *testing.T) {
	schemes := []config.Scheme{
		scheme("sentiment", "radio", "positive", "negative", "neutral"),
		scheme("aspects", "multiselect", "acting", "plot", "visuals", "music"),
	}
	a, err := ReadAnnotations(abs(t, examples+"dataset-publishing/seed_annotations"), schemes)
	if err != nil {
		t.Fatal(err)
	}
	r := resolve(t, a, Majority)
	for item, want := range map[string]string{
		"r1": "positive", "r2": "negative", "r3": "neutral", "r4": "positive", "r5": "negative", "r6": "negative",
	} {
		if got, _ := r.Target(item, "sentiment"); got != want {
			t.Errorf("dataset-publishing %s = %v, want %s (alice wins ties)", item, got, want)
		}
	}
	if got, _ := r.Target("r2", "aspects"); !reflect.DeepEqual(got, []string{"plot"}) {
		t.Errorf("r2 aspects = %v, want [plot]", got)
	}
	c := resolve(t, a, Consensus)
	if st := c.Stats.Schemas["sentiment"]; st.Method != "dawid-skene" || st.Items != 6 || st.Disputed != 2 || st.Iterations > dsMaxIter {
		t.Errorf("consensus stats = %+v", st)
	}
	for _, item := range []string{"r1", "r2", "r4", "r6"} { // both agree
		m, _ := r.Target(item, "sentiment")
		if got, _ := c.Target(item, "sentiment"); got != m {
			t.Errorf("consensus %s = %v, want %v", item, got, m)
		}
	}

	solo, err := ReadAnnotations(abs(t, examples+"solo-mode/annotations"), schemes[:1])
	if err != nil {
		t.Fatal(err)
	}
	r = resolve(t, solo, Majority)
	for item, want := range map[string]string{"3": "neutral", "4": "positive", "9": "neutral", "20": "negative"} {
		if got, _ := r.Target(item, "sentiment"); got != want {
			t.Errorf("solo-mode %s = %v, want %s", item, got, want)
		}
	}
}

// TestConsensusAdversarial has two careful annotators who each err on about
// one item in six and a third who always gives the other label. Majority
// follows the adversary whenever a careful annotator errs; Dawid-Skene learns
// that the adversary's label is the truth reversed.
func TestConsensusAdversarial(t *testing.T) {
	s := scheme("q", "radio", "yes", "no")
	rng := rand.New(rand.NewPCG(1, 2))
	flip := map[string]string{"yes": "no", "no": "yes"}
	truth := map[string]string{}
	votes := map[string]map[string]any{}
	for i := range 300 {
		id := fmt.Sprintf("item%03d", i)
		tr := "yes"
		if rng.IntN(3) == 0 {
			tr = "no"
		}
		truth[id] = tr
		v := map[string]any{"liar": flip[tr]}
		for _, who := range []string{"ann", "ben"} {
			if rng.IntN(6) == 0 {
				v[who] = flip[tr]
			} else {
				v[who] = tr
			}
		}
		votes[id] = v
	}
	a := fromVotes(s, []string{"ann", "ben", "liar"}, votes)
	accuracy := func(r *Resolution) float64 {
		right := 0
		for id, tr := range truth {
			if got, _ := r.Target(id, "q"); got == tr {
				right++
			}
		}
		return float64(right) / float64(len(truth))
	}
	maj, ds := resolve(t, a, Majority), resolve(t, a, Consensus)
	mAcc, dAcc := accuracy(maj), accuracy(ds)
	t.Logf("majority %.3f, Dawid-Skene %.3f", mAcc, dAcc)
	if mAcc > 0.85 {
		t.Errorf("majority accuracy %.3f: the case does not separate the methods", mAcc)
	}
	if dAcc < 0.97 {
		t.Errorf("Dawid-Skene accuracy %.3f, want >= 0.97", dAcc)
	}
	// Items all three annotators agree on must be the reverse of what they
	// said, which EM learns only slowly: it may use every round it has.
	st := ds.Stats.Schemas["q"]
	if st.Method != "dawid-skene" || st.Iterations < 2 || st.Iterations > dsMaxIter {
		t.Errorf("stats = %+v", st)
	}
	if st.Reliability["liar"] > 0.05 || st.Reliability["ann"] < 0.75 {
		t.Errorf("reliability = %v: the liar should be near 0, ann near 0.83", st.Reliability)
	}
}

// TestDawidSkeneByHand checks one EM round on three items against numbers
// worked out by hand. Classes a=0, b=1; annotators X, Y, Z.
//
//	item 1: X=a Y=a Z=b  (majority a)
//	item 2: X=b Y=b Z=b  (majority b)
//	item 3: X=a Y=b Z=b  (majority b)
func TestDawidSkeneByHand(t *testing.T) {
	const X, Y, Z, A, B = 0, 1, 2, 0, 1
	obs := [][]observation{
		{{X, A}, {Y, A}, {Z, B}},
		{{X, B}, {Y, B}, {Z, B}},
		{{X, A}, {Y, B}, {Z, B}},
	}
	res := dawidSkene(obs, []int{A, B, B}, 3, 2, 1, dsTol)

	// M-step from the majority: one item of class a, two of b; each count
	// gets 0.01, each total 0.02.
	pa, pb := 1.01/3.02, 2.01/3.02
	wantConf := [3][2][2]float64{
		X: {A: {1.01 / 1.02, 0.01 / 1.02}, B: {1.01 / 2.02, 1.01 / 2.02}},
		Y: {A: {1.01 / 1.02, 0.01 / 1.02}, B: {0.01 / 2.02, 2.01 / 2.02}},
		Z: {A: {0.01 / 1.02, 1.01 / 1.02}, B: {0.01 / 2.02, 2.01 / 2.02}},
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %.15f, want %.15f", what, got, want)
		}
	}
	near("prior a", res.prior[A], pa)
	near("prior b", res.prior[B], pb)
	for j := range wantConf {
		for c := range 2 {
			for l := range 2 {
				near(fmt.Sprintf("confusion[%d][%d][%d]", j, c, l), res.confusion[j][c][l], wantConf[j][c][l])
			}
		}
	}

	// E-step: prior times the confusion entries of each vote, normalised.
	c := wantConf
	scores := [3][2]float64{
		{pa * c[X][A][A] * c[Y][A][A] * c[Z][A][B], pb * c[X][B][A] * c[Y][B][A] * c[Z][B][B]},
		{pa * c[X][A][B] * c[Y][A][B] * c[Z][A][B], pb * c[X][B][B] * c[Y][B][B] * c[Z][B][B]},
		{pa * c[X][A][A] * c[Y][A][B] * c[Z][A][B], pb * c[X][B][A] * c[Y][B][B] * c[Z][B][B]},
	}
	for i, s := range scores {
		near(fmt.Sprintf("item %d posterior a", i+1), res.posterior[i][A], s[0]/(s[0]+s[1]))
		near(fmt.Sprintf("item %d posterior b", i+1), res.posterior[i][B], s[1]/(s[0]+s[1]))
	}
	// Worked through: item 1 scores 0.334437*0.990196^3 = 0.324697 for a
	// against 0.665563*0.5*0.004950*0.995050 = 0.001639 for b, so a at
	// 0.99498; item 3 scores 0.334437*0.990196*0.009804*0.990196 = 0.003215
	// for a against 0.665563*0.5*0.995050*0.995050 = 0.329495 for b.
	if !reflect.DeepEqual(res.labels, []int{A, B, B}) {
		t.Errorf("labels = %v, want [a b b]", res.labels)
	}
	near("item 1 posterior a, rounded", math.Round(res.posterior[0][A]*1e5)/1e5, 0.99498)
	near("item 3 posterior a, rounded", math.Round(res.posterior[2][A]*1e5)/1e5, 0.00966)
	if res.iterations != 1 || res.converged {
		t.Errorf("iterations = %d, converged = %v; want 1 round, not converged", res.iterations, res.converged)
	}
}

// TestConsensusConverges has four honest annotators who err on 10 to 25% of
// 500 yes/no items; EM settles well before the cap, matches the majority's
// accuracy and ranks the annotators by their care.
func TestConsensusConverges(t *testing.T) {
	s := scheme("q", "radio", "yes", "no")
	rng := rand.New(rand.NewPCG(3, 4))
	flip := map[string]string{"yes": "no", "no": "yes"}
	names := []string{"w1", "w2", "w3", "w4"}
	errPercent := []int{10, 15, 20, 25}
	truth := map[string]string{}
	votes := map[string]map[string]any{}
	for i := range 500 {
		id := fmt.Sprintf("item%03d", i)
		tr := []string{"yes", "no"}[rng.IntN(2)]
		truth[id] = tr
		v := map[string]any{}
		for j, w := range names {
			v[w] = tr
			if rng.IntN(100) < errPercent[j] {
				v[w] = flip[tr]
			}
		}
		votes[id] = v
	}
	r := resolve(t, fromVotes(s, names, votes), Consensus)
	st := r.Stats.Schemas["q"]
	if !st.Converged || st.Iterations >= dsMaxIter {
		t.Errorf("stats = %+v, want convergence before the cap", st)
	}
	right := 0
	for id, tr := range truth {
		if got, _ := r.Target(id, "q"); got == tr {
			right++
		}
	}
	if acc := float64(right) / float64(len(truth)); acc < 0.93 {
		t.Errorf("accuracy %.3f after %d rounds", acc, st.Iterations)
	}
	rel := st.Reliability
	if !(rel["w1"] > rel["w2"] && rel["w2"] > rel["w3"] && rel["w3"] > rel["w4"]) {
		t.Errorf("reliability %v does not follow the error rates", rel)
	}
}

func TestDawidSkeneIterationCap(t *testing.T) {
	obs := [][]observation{{{0, 0}, {1, 1}}, {{0, 1}, {1, 1}}, {{0, 0}, {1, 0}}, {{0, 1}, {1, 0}}}
	res := dawidSkene(obs, []int{0, 1, 0, 1}, 2, 2, 3, 0)
	if res.iterations != 3 || res.converged {
		t.Errorf("tolerance 0, cap 3: %d rounds, converged %v", res.iterations, res.converged)
	}
	res = dawidSkene(obs, []int{0, 1, 0, 1}, 2, 2, dsMaxIter, dsTol)
	if res.iterations > dsMaxIter {
		t.Errorf("%d rounds, want at most %d", res.iterations, dsMaxIter)
	}
	for i, p := range res.posterior {
		if s := p[0] + p[1]; math.Abs(s-1) > 1e-9 {
			t.Errorf("item %d posteriors sum to %v", i, s)
		}
	}
}

func TestConsensusClassesIncludeObservedExtras(t *testing.T) {
	s := scheme("q", "radio", "a", "b")
	a := fromVotes(s, []string{"p1", "p2", "p3"}, map[string]map[string]any{
		"x": {"p1": "other", "p2": "other", "p3": "a"},
		"y": {"p1": "a", "p2": "a", "p3": "a"},
		"z": {"p1": "b", "p2": "b", "p3": "b"},
	})
	r := resolve(t, a, Consensus)
	for item, want := range map[string]string{"x": "other", "y": "a", "z": "b"} {
		if got, _ := r.Target(item, "q"); got != want {
			t.Errorf("%s = %v, want %s", item, got, want)
		}
	}
}
