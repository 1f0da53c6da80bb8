package project

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"potato-training/lib/config"
)

// fromVotes builds Annotations from {item: {annotator: label}} for one
// radio schema, annotators in the order given; each vote's map is
// {label: "true"}, as Potato's radio writes it.
func fromVotes(s config.Scheme, annotators []string, votes map[string]map[string]any) *Annotations {
	a := &Annotations{Schemes: []config.Scheme{s}, votes: map[string]map[string][]Vote{}}
	for _, id := range annotators {
		a.Annotators = append(a.Annotators, Annotator{ID: id, Dir: id})
	}
	active := map[int]bool{}
	for item, byAnnotator := range votes {
		for j, id := range annotators {
			if t, ok := byAnnotator[id]; ok {
				if a.votes[item] == nil {
					a.votes[item] = map[string][]Vote{}
				}
				key := pyJSON(map[string]any{t.(string): "true"})
				a.votes[item][s.Name] = append(a.votes[item][s.Name], Vote{Annotator: j, Key: key, Target: t})
				active[j] = true
			}
		}
	}
	a.active = len(active)
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
		{"i4", "sentiment", "neutral"},
		{"i1", "aspects", []string{"acting", "plot"}}, // two maps, alice's first
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
	// Alice chose two radio labels and ann_b one: 1-1, and alice's map,
	// seen first, wins and means nothing, so the item has no sentiment.
	if got, ok := r.Target("i3", "sentiment"); ok {
		t.Errorf("i3 sentiment = %v, want none: alice's two labels win the tie", got)
	}
	if r.Targets("i5") != nil {
		t.Errorf("i5 targets = %v, want none", r.Targets("i5"))
	}
	st := r.Stats
	if st.Method != Majority || st.Annotators != 2 || st.Items != 4 {
		t.Errorf("stats = %+v", st)
	}
	if s := st.Schemas["sentiment"]; s.Method != "majority" || s.Items != 3 || s.Disputed != 2 {
		t.Errorf("sentiment stats = %+v, want 3 items, 2 disputed", s)
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
	// Two annotators: consensus is Dawid-Skene for every schema, as in
	// Potato, even where one of them voted.
	want := map[string]string{"sentiment": "dawid-skene", "aspects": "dawid-skene", "rating": "dawid-skene", "score": "dawid-skene", "toxic": "dawid-skene"}
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
// worked out by hand, as Potato's dawid_skene computes them. Classes a=0,
// b=1; annotators X, Y, Z.
//
//	item 1: X=a Y=a Z=b  (start 2/3, 1/3)
//	item 2: X=b Y=b Z=b  (start 0, 1)
//	item 3: X=a Y=b Z=b  (start 1/3, 2/3)
func TestDawidSkeneByHand(t *testing.T) {
	const X, Y, Z, A, B = 0, 1, 2, 0, 1
	obs := [][]observation{
		{{X, A}, {Y, A}, {Z, B}},
		{{X, B}, {Y, B}, {Z, B}},
		{{X, A}, {Y, B}, {Z, B}},
	}
	res := dawidSkene(obs, 3, 2, 1, dsTol)

	// M-step from the vote frequencies, no smoothing: prior a = (2/3 + 0 +
	// 1/3)/3. X said a on items 1 and 3, whose a-weights sum to 1, and b on
	// item 2, a-weight 0: row a is (1, 0); row b is (1/3+2/3, 1)/2. Z only
	// ever said b: both its rows are (0, 1).
	wantConf := [3][2][2]float64{
		X: {A: {1, 0}, B: {0.5, 0.5}},
		Y: {A: {2.0 / 3, 1.0 / 3}, B: {1.0 / 6, 5.0 / 6}},
		Z: {A: {0, 1}, B: {0, 1}},
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %.15f, want %.15f", what, got, want)
		}
	}
	near("prior a", res.prior[A], 1.0/3)
	near("prior b", res.prior[B], 2.0/3)
	for j := range wantConf {
		for c := range 2 {
			for l := range 2 {
				near(fmt.Sprintf("confusion[%d][%d][%d]", j, c, l), res.confusion[j][c][l], wantConf[j][c][l])
			}
		}
	}
	// E-step. Item 1: a 1/3*1*2/3*1 = 2/9, b 2/3*1/2*1/6*1 = 1/18, so a at
	// 0.8. Item 2: a has X's 0, so b at 1. Item 3: a 1/3*1*1/3*1 = 1/9, b
	// 2/3*1/2*5/6*1 = 5/18, so a at 2/7.
	near("item 1 posterior a", res.posterior[0][A], 0.8)
	near("item 2 posterior a", res.posterior[1][A], 0)
	near("item 3 posterior a", res.posterior[2][A], 2.0/7)
	if !reflect.DeepEqual(res.labels, []int{A, B, B}) {
		t.Errorf("labels = %v, want [a b b]", res.labels)
	}
	if res.iterations != 1 || res.converged {
		t.Errorf("iterations = %d, converged = %v; want 1 round, not converged", res.iterations, res.converged)
	}
	// Reliability: the prior-weighted diagonal, X 1/3*1 + 2/3*1/2.
	near("reliability X", res.reliability[X], 2.0/3)
}

// TestDawidSkeneTieGoesToClassOrder has two annotators who disagree on one
// item: the posteriors end level, and the class first in sorted key order
// wins, while majority takes the first annotator's map.
func TestDawidSkeneTieGoesToClassOrder(t *testing.T) {
	s := scheme("q", "radio", "b", "a")
	a := fromVotes(s, []string{"x", "y"}, map[string]map[string]any{"i": {"x": "b", "y": "a"}})
	if got, _ := resolve(t, a, Majority).Target("i", "q"); got != "b" {
		t.Errorf("majority = %v, want b (x is first)", got)
	}
	r := resolve(t, a, Consensus)
	if got, _ := r.Target("i", "q"); got != "a" {
		t.Errorf("consensus = %v, want a: {\"a\": \"true\"} sorts first", got)
	}
}

// TestDawidSkeneOneClass: when every vote is the same map there is one
// class, no round is run, and every annotator is reliable.
func TestDawidSkeneOneClass(t *testing.T) {
	res := dawidSkene([][]observation{{{0, 0}, {1, 0}}, {{1, 0}}}, 3, 1, dsMaxIter, dsTol)
	if res.iterations != 0 || !reflect.DeepEqual(res.labels, []int{0, 0}) || res.reliability[0] != 1 || !math.IsNaN(res.reliability[2]) {
		t.Errorf("one class: %+v", res)
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
	res := dawidSkene(obs, 2, 2, 3, 0)
	if res.iterations != 3 || res.converged {
		t.Errorf("tolerance 0, cap 3: %d rounds, converged %v", res.iterations, res.converged)
	}
	res = dawidSkene(obs, 2, 2, dsMaxIter, dsTol)
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

// TestMixedEncodings reads testdata/mixed, where each annotator writes a
// chosen radio label in another encoding ("true", the label's name, 1),
// one multiselect answer has a single choice and likert answers are given
// as "3". Each annotator's target is what FORMATS.md says the encoding
// means; majority then votes on the whole value maps, as Potato does, so
// that {"positive": "positive"} and {"positive": 1} are two answers.
func TestMixedEncodings(t *testing.T) {
	schemes := []config.Scheme{
		scheme("sentiment", "radio", "positive", "negative", "neutral"),
		scheme("aspects", "multiselect", "acting", "plot", "music"),
		scheme("rating", "likert"),
	}
	a, err := ReadAnnotations(abs(t, "testdata/mixed"), schemes)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		annotator int
		item      string
		want      map[string]any
	}{
		{0, "m1", map[string]any{"sentiment": "positive", "aspects": []string{"plot"}, "rating": 3.0}},
		{1, "m1", map[string]any{"sentiment": "positive", "aspects": []string{"plot"}, "rating": 3.0}},
		{2, "m1", map[string]any{"sentiment": "positive", "aspects": []string{"plot"}, "rating": 3.0}},
		{0, "m2", map[string]any{"sentiment": "negative", "aspects": []string{"acting"}, "rating": 4.0}},
		{1, "m2", map[string]any{"sentiment": "positive", "aspects": []string{"acting"}, "rating": 4.0}}, // {"4": "true"}
		{2, "m2", map[string]any{"sentiment": "positive", "rating": 5.0}},
		{0, "m3", map[string]any{}}, // two radio labels chosen
		{1, "m3", map[string]any{"sentiment": "neutral"}},
		{3, "m4", map[string]any{"sentiment": "neutral", "rating": 3.0}},
		{3, "m5", map[string]any{"sentiment": "neutral", "rating": 2.0}},
	} {
		if got := targetsOf(a, tc.annotator, tc.item); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s = %#v, want %#v", a.Annotators[tc.annotator].ID, tc.item, got, tc.want)
		}
	}

	r := resolve(t, a, Majority)
	for _, tc := range []struct {
		item, schema string
		want         any // nil: no target
	}{
		{"m1", "sentiment", "positive"}, // three maps, one each: the first
		{"m1", "aspects", []string{"plot"}},
		{"m1", "rating", 3.0},
		// Two annotators said positive, in two encodings: three maps of
		// one vote each, and the first annotator's negative wins.
		{"m2", "sentiment", "negative"},
		{"m2", "aspects", []string{"acting"}},
		{"m2", "rating", 4.0}, // {"4": "4"}, {"4": "true"}, {"5": "5"}: the first
		{"m3", "sentiment", nil},
		{"m4", "sentiment", "neutral"},
		{"m4", "rating", 3.0},
		{"m5", "sentiment", "negative"},
		{"m5", "rating", 2.0}, // {"2": "2"} twice against {"2": "true"}
	} {
		got, ok := r.Target(tc.item, tc.schema)
		if tc.want == nil && ok || tc.want != nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("majority %s %s = %#v (%v), want %#v", tc.item, tc.schema, got, ok, tc.want)
		}
	}
	if st := r.Stats.Schemas["sentiment"]; st.Items != 4 || st.Disputed != 4 {
		t.Errorf("sentiment stats = %+v, want 4 items, 4 disputed (every map differs)", st)
	}

	c := resolve(t, a, Consensus)
	for _, s := range schemes {
		if st := c.Stats.Schemas[s.Name]; st.Method != "dawid-skene" || st.Iterations < 1 || st.Iterations > dsMaxIter {
			t.Errorf("consensus %s stats = %+v", s.Name, st)
		}
	}
	// m5: ann-name and ann-one said negative, each in their own encoding,
	// ann-true-2 neutral. In the first M-step each of the three maps has
	// m5's weight 1/3, and ann-true-2's {"neutral": "true"} has m4's 1 as
	// well; every annotator's confusion row for each of the three classes
	// gives their own m5 map with probability 1, so the E-step's scores are
	// the priors, 4/15 for neutral against 1/15 for each negative map.
	// Majority said negative.
	if got, _ := c.Target("m5", "sentiment"); got != "neutral" {
		t.Errorf("consensus m5 sentiment = %v, want neutral", got)
	}
	if got, _ := c.Target("m4", "sentiment"); got != "neutral" {
		t.Errorf("consensus m4 sentiment = %v, want neutral", got)
	}
	for _, id := range []string{"m1", "m2", "m3", "m4", "m5"} {
		t.Logf("consensus %s: %v", id, c.Targets(id))
	}
}
