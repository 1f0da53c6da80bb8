package tfidf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello, World!", []string{"hello", "world"}},
		{"Don't STOP me now", []string{"don't", "stop", "me", "now"}},
		{"rock’n’roll", []string{"rock'n'roll"}},
		{"'quoted' words' end", []string{"quoted", "words", "end"}},
		{"snake_case-and/slash 42x", []string{"snake", "case", "and", "slash", "42x"}},
		{"Ünïcode ÉTÉ 2024 ΣΟΦΙΑ", []string{"ünïcode", "été", "2024", "σοφια"}},
		{"cafe\u0301 ok", []string{"cafe\u0301", "ok"}},
		{"日本語 テキスト", []string{"日本語", "テキスト"}},
		{"bad\xffbyte", []string{"bad", "byte"}},
	} {
		if got := Tokenize(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Tokenize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTerms(t *testing.T) {
	got := Terms("The cat, the HAT.")
	want := []string{"the", "cat", "the", "hat", "the cat", "cat the", "the hat"}
	if !slices.Equal(got, want) {
		t.Errorf("Terms = %q, want %q", got, want)
	}
	if got := Terms("one"); !slices.Equal(got, []string{"one"}) {
		t.Errorf("Terms(one) = %q", got)
	}
}

// TestVectorValues checks the vocabulary order, the idf values and an
// L2-normalised row against figures worked out by hand for three
// documents.
func TestVectorValues(t *testing.T) {
	texts := []string{"a b", "a c", "A b b"}
	// df: a 3; "a b" 2, b 2; "a c" 1, "b b" 1, c 1. n = 3.
	idf1 := math.Log(4.0/4) + 1 // df 3
	idf2 := math.Log(4.0/3) + 1 // df 2
	idf3 := math.Log(4.0/2) + 1 // df 1
	wantTerms := []string{"a", "a b", "b", "a c", "b b", "c"}
	wantIDF := []float64{idf1, idf2, idf2, idf3, idf3, idf3}

	for _, sublinear := range []bool{true, false} {
		v, tok, err := buildVocabulary(context.Background(), texts, 1, 100, sublinear)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(v.terms, wantTerms) {
			t.Fatalf("terms = %q, want %q", v.terms, wantTerms)
		}
		for i, want := range wantIDF {
			if math.Abs(v.idf[i]-want) > 1e-12 {
				t.Errorf("idf[%q] = %v, want %v", v.terms[i], v.idf[i], want)
			}
		}
		// Third document: a once, b twice, "a b" once, "b b" once.
		tfB := 2.0
		if sublinear {
			tfB = 1 + math.Log(2)
		}
		raw := []float64{1 * idf1, 1 * idf2, tfB * idf2, 0, 1 * idf3, 0}
		var norm float64
		for _, x := range raw {
			norm += x * x
		}
		norm = math.Sqrt(norm)
		var s scratch
		idx, val := v.vector(tok.ids[tok.off[2]:tok.off[3]], &s)
		if !slices.Equal(idx, []int32{0, 1, 2, 4}) {
			t.Fatalf("sublinear=%v: indices %v, want [0 1 2 4]", sublinear, idx)
		}
		for j, f := range idx {
			if want := raw[f] / norm; math.Abs(float64(val[j])-want) > 1e-6 {
				t.Errorf("sublinear=%v: value of %q = %v, want %v", sublinear, v.terms[f], val[j], want)
			}
		}
		// The same text vectorised from scratch, as Predict does.
		idx2, val2 := v.vector(v.wordIDs("a B b", &s), &s)
		if !slices.Equal(idx2, []int32{0, 1, 2, 4}) || math.Abs(float64(val2[0])-raw[0]/norm) > 1e-6 {
			t.Errorf("sublinear=%v: text row %v %v differs from the training row", sublinear, idx2, val2)
		}
	}
}

func TestVocabularyLimits(t *testing.T) {
	texts := []string{"zeta alpha", "alpha beta", "beta zeta", "gamma"}
	// df: alpha 2, beta 2, zeta 2, all else 1.
	v, _, err := buildVocabulary(context.Background(), texts, 2, 100, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha", "beta", "zeta"}; !slices.Equal(v.terms, want) {
		t.Errorf("min_df 2: terms %q, want %q", v.terms, want)
	}
	v, _, err = buildVocabulary(context.Background(), texts, 1, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha", "beta"}; !slices.Equal(v.terms, want) {
		t.Errorf("max_features 2: terms %q, want %q", v.terms, want)
	}
	if _, ok := v.words["zeta"]; ok {
		t.Errorf("a word of no kept feature is still in the vocabulary")
	}
}

func TestMinDFDefault(t *testing.T) {
	labels := []string{"x", "y"}
	for _, tc := range []struct{ n, want int }{{SmallCorpus - 1, 1}, {SmallCorpus, DefaultMinDF}} {
		docs := nominalCorpus(1, tc.n, 500, labels, 0)
		m, err := Fit(context.Background(), docs, nil, labels, Options{MaxEpochs: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Options().MinDF; got != tc.want {
			t.Errorf("%d documents: min_df %d, want %d", tc.n, got, tc.want)
		}
	}
}

// split80 cuts docs into training and validation documents.
func split80(docs []Doc) (train, val []Doc) {
	cut := len(docs) * 8 / 10
	return docs[:cut], docs[cut:]
}

func fitNominal(t *testing.T, opt Options) (*Model, []Doc) {
	t.Helper()
	labels := []string{"sport", "food", "music"}
	train, val := split80(nominalCorpus(11, 900, 3000, labels, 0))
	m, err := Fit(context.Background(), train, val, labels, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, val
}

func accuracy(m *Model, docs []Doc) float64 {
	right := 0
	for _, d := range docs {
		if l, _ := m.PredictNominal(d.Text); l == d.Labels[0] {
			right++
		}
	}
	return float64(right) / float64(len(docs))
}

func TestNominalSeparable(t *testing.T) {
	for _, threads := range []int{1, 2} {
		m, val := fitNominal(t, Options{Threads: threads})
		if acc := accuracy(m, val); acc <= 0.95 {
			t.Errorf("threads %d: validation accuracy %.3f, want > 0.95", threads, acc)
		}
		s := m.Summary()
		if s.ValAccuracy <= 0.95 || s.BestEpoch < 1 || s.BestEpoch > s.Epochs || s.Features == 0 {
			t.Errorf("threads %d: summary %+v", threads, s)
		}
	}
}

func TestProbabilities(t *testing.T) {
	m, val := fitNominal(t, Options{})
	texts := []string{"", "words never seen before", val[0].Text, val[1].Text + " " + val[2].Text}
	for _, text := range texts {
		ps := m.Predict(text)
		if len(ps) != 3 {
			t.Fatalf("Predict returned %d scores", len(ps))
		}
		var sum float64
		for i, s := range ps {
			if s.P < 0 || s.P > 1 {
				t.Errorf("P(%s) = %v", s.Label, s.P)
			}
			if i > 0 && s.P > ps[i-1].P {
				t.Errorf("scores not sorted: %v", ps)
			}
			sum += s.P
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("probabilities of %q sum to %v", text, sum)
		}
		label, p := m.PredictNominal(text)
		if label != ps[0].Label || p != ps[0].P {
			t.Errorf("PredictNominal = %s %v, Predict's best %v", label, p, ps[0])
		}
	}
}

func TestMultilabel(t *testing.T) {
	labels := []string{"red", "green", "blue", "gold"}
	train, val := split80(multilabelCorpus(5, 1500, 3000, labels))
	m, err := Fit(context.Background(), train, val, labels, Options{Multilabel: true, Threads: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tp, fp, fn int
	for _, d := range val {
		chosen, conf := m.PredictMultilabel(d.Text, 0.5)
		if conf < 0.5 || conf > 1 {
			t.Errorf("confidence %v outside [0.5, 1]", conf)
		}
		for _, l := range chosen {
			if slices.Contains(d.Labels, l) {
				tp++
			} else {
				fp++
			}
		}
		for _, l := range d.Labels {
			if !slices.Contains(chosen, l) {
				fn++
			}
		}
		probs := m.Probabilities(d.Text)
		lowest := 1.0
		for c, p := range probs {
			if p <= 0 || p >= 1 {
				t.Errorf("P(%s) = %v", labels[c], p)
			}
			lowest = min(lowest, max(p, 1-p))
		}
		if conf != lowest {
			t.Errorf("confidence %v, want the lowest decision probability %v", conf, lowest)
		}
	}
	f1 := 2 * float64(tp) / float64(2*tp+fp+fn)
	if f1 < 0.9 {
		t.Errorf("micro-F1 %.3f, want >= 0.9", f1)
	}
	if s := m.Summary(); math.Abs(s.ValF1-f1) > 0.02 {
		t.Errorf("summary's F1 %.3f, measured %.3f", s.ValF1, f1)
	}
}

func TestDeterministic(t *testing.T) {
	a, _ := fitNominal(t, Options{Seed: 3, Threads: 2})
	b, _ := fitNominal(t, Options{Seed: 3, Threads: 2})
	c, _ := fitNominal(t, Options{Seed: 3, Threads: 1})
	e, _ := fitNominal(t, Options{Seed: 3, Threads: 5})
	d, _ := fitNominal(t, Options{Seed: 4, Threads: 2})
	if !slices.Equal(a.w, b.w) || !slices.Equal(a.b, b.b) {
		t.Errorf("two fits with the same seed and threads differ")
	}
	if !slices.Equal(a.w, c.w) || !slices.Equal(a.b, c.b) {
		t.Errorf("fits on 1 and 2 threads differ")
	}
	if !slices.Equal(a.w, e.w) || !slices.Equal(a.b, e.b) {
		t.Errorf("fits on 2 and 5 threads differ")
	}
	if slices.Equal(a.w, d.w) {
		t.Errorf("fits with different seeds are identical: the seed is not used")
	}
}

func TestCancel(t *testing.T) {
	labels := []string{"sport", "food", "music"}
	train, val := split80(nominalCorpus(2, 600, 2000, labels, 0))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	m, err := Fit(ctx, train, val, labels, Options{Patience: -1}, func(e Epoch) {
		calls++
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if calls != 1 {
		t.Errorf("progress called %d times after cancelling in the first epoch", calls)
	}
	if m == nil || m.Summary().Epochs != 1 || len(m.Predict("x")) != 3 {
		t.Errorf("no usable model of the finished epoch returned with the error")
	}

	m, err = Fit(ctx, train, val, labels, Options{}, nil)
	if !errors.Is(err, context.Canceled) || m != nil {
		t.Errorf("already cancelled: %v, %v; want context.Canceled and no model", m, err)
	}
}

func TestEarlyStop(t *testing.T) {
	labels := []string{"sport", "food", "music"}
	train, val := split80(nominalCorpus(2, 600, 2000, labels, 0))
	var epochs []Epoch
	m, err := Fit(context.Background(), train, val, labels, Options{MaxEpochs: 100, Patience: 2}, func(e Epoch) {
		epochs = append(epochs, e)
	})
	if err != nil {
		t.Fatal(err)
	}
	s := m.Summary()
	if len(epochs) != s.Epochs || len(epochs) == 100 || s.Epochs-s.BestEpoch != 2 {
		t.Fatalf("%d epochs reported, summary %+v: want an early stop 2 epochs after the best", len(epochs), s)
	}
	best := epochs[s.BestEpoch-1]
	if !best.Best || best.ValLoss != s.ValLoss || best.N != s.BestEpoch || best.Of != 100 {
		t.Errorf("best epoch %+v does not match summary %+v", best, s)
	}
	for _, e := range epochs[s.BestEpoch:] {
		if e.Best {
			t.Errorf("epoch %d after the best is marked best", e.N)
		}
	}
}

func TestSaveLoad(t *testing.T) {
	nominal, val := fitNominal(t, Options{})
	labels := []string{"red", "green", "blue", "gold"}
	mtrain, mval := split80(multilabelCorpus(5, 400, 1000, labels))
	multi, err := Fit(context.Background(), mtrain, mval, labels, Options{Multilabel: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Model{nominal, multi} {
		var buf bytes.Buffer
		if err := m.Save(&buf); err != nil {
			t.Fatal(err)
		}
		saved := buf.String()
		var head map[string]any
		if err := json.Unmarshal(buf.Bytes(), &head); err != nil {
			t.Fatal(err)
		}
		if head["format"] != "potato-tfidf-logreg" || head["v"] != 1.0 || head["multilabel"] != m.Multilabel() {
			t.Errorf("header: format %v v %v multilabel %v", head["format"], head["v"], head["multilabel"])
		}
		l, err := Load(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(l.Labels(), m.Labels()) || l.Multilabel() != m.Multilabel() || l.Summary() != m.Summary() {
			t.Errorf("loaded model's labels, kind or summary differ")
		}
		for _, d := range append(slices.Clone(val), mval...) {
			if p, q := m.Probabilities(d.Text), l.Probabilities(d.Text); !slices.Equal(p, q) {
				t.Fatalf("prediction of %q: %v before saving, %v after loading", d.Text, p, q)
			}
		}
		var again bytes.Buffer
		if err := l.Save(&again); err != nil {
			t.Fatal(err)
		}
		if again.String() != saved {
			t.Errorf("saving a loaded model gives a different file")
		}
	}
}

func TestLoadRejects(t *testing.T) {
	m, _ := fitNominal(t, Options{MaxEpochs: 1})
	var buf bytes.Buffer
	if err := m.Save(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	edit := func(f func(map[string]any)) string {
		var doc map[string]any
		if err := json.Unmarshal([]byte(good), &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"not json", "weights", "reading model"},
		{"no format", `{"v":1}`, `no "format" field`},
		{"other format", edit(func(d map[string]any) { d["format"] = "sklearn" }), `format "sklearn"`},
		{"newer version", edit(func(d map[string]any) { d["v"] = 2 }), "version 2 is not supported"},
		{"short idf", edit(func(d map[string]any) { d["idf"] = d["idf"].([]any)[1:] }), "idf values"},
		{"short bias", edit(func(d map[string]any) { d["bias"] = d["bias"].([]any)[1:] }), "biases"},
		{"short weights", edit(func(d map[string]any) {
			w := d["weights"].([]any)
			w[1] = w[1].([]any)[1:]
		}), "weights[1]"},
		{"bad term", edit(func(d map[string]any) { d["vocab"].([]any)[0] = "Three Words Here" }), "vocab[0]"},
		{"repeated term", edit(func(d map[string]any) {
			v := d["vocab"].([]any)
			v[1] = v[0]
		}), "vocab[1]"},
		{"repeated label", edit(func(d map[string]any) { d["labels"].([]any)[1] = "sport" }), "listed twice"},
	} {
		_, err := Load(strings.NewReader(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestTooFewExamples(t *testing.T) {
	labels := []string{"x", "y"}
	docs := nominalCorpus(3, 30, 200, labels, 0)
	same := slices.Clone(docs)
	for i := range same {
		same[i].Labels = []string{"x"}
	}
	unlabelled := slices.Clone(docs[:12])
	for i := range unlabelled[3:] {
		unlabelled[3+i].Labels = nil
	}
	none := multilabelCorpus(3, 30, 200, labels)
	for i := range none {
		none[i].Labels = nil
	}
	for _, tc := range []struct {
		name  string
		docs  []Doc
		multi bool
		want  string
	}{
		{"nine documents", docs[:MinTrainDocs-1], false, "9 labelled training documents"},
		{"one label", same, false, "30 labelled training documents carrying 1 of the 2 labels"},
		{"unlabelled skipped", unlabelled, false, "3 labelled training documents"},
		{"multilabel nine", none[:9], true, "9 training documents"},
		{"multilabel none carried", none, true, "carrying 0 of the 2 labels"},
	} {
		_, err := Fit(context.Background(), tc.docs, nil, labels, Options{Multilabel: tc.multi}, nil)
		if !errors.Is(err, ErrTooFewExamples) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrTooFewExamples mentioning %q", tc.name, err, tc.want)
		}
	}
	if _, err := Fit(context.Background(), docs[:MinTrainDocs], nil, labels, Options{MaxEpochs: 2}, nil); err != nil {
		t.Errorf("%d documents of 2 labels: %v", MinTrainDocs, err)
	}
}

func TestBadInput(t *testing.T) {
	labels := []string{"x", "y"}
	docs := nominalCorpus(3, 30, 200, labels, 0)
	twoLabels := slices.Clone(docs)
	twoLabels[4].Labels = []string{"x", "y"}
	unknown := slices.Clone(docs)
	unknown[5].Labels = []string{"z"}
	for _, tc := range []struct {
		name       string
		train, val []Doc
		labels     []string
		opt        Options
		want       string
	}{
		{"two labels", twoLabels, nil, labels, Options{}, "training document 4 has 2 labels"},
		{"unknown label", docs, unknown, labels, Options{}, `validation document 5 has label "z"`},
		{"repeated label", docs, nil, []string{"x", "y", "x"}, Options{}, `label "x" is listed twice`},
		{"negative l2", docs, nil, labels, Options{L2: -1}, "L2 must be"},
	} {
		_, err := Fit(context.Background(), tc.train, tc.val, tc.labels, tc.opt, nil)
		if err == nil || errors.Is(err, ErrTooFewExamples) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestNoValidation(t *testing.T) {
	labels := []string{"sport", "food", "music"}
	train, val := split80(nominalCorpus(8, 600, 2000, labels, 0))
	m, err := Fit(context.Background(), train, nil, labels, Options{}, func(e Epoch) {
		if e.ValLoss != 0 || e.ValAccuracy != 0 {
			t.Errorf("validation figures %+v without validation documents", e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if acc := accuracy(m, val); acc <= 0.9 {
		t.Errorf("accuracy %.3f without validation documents", acc)
	}
}

func TestShrinkFactor(t *testing.T) {
	for a := 0.0; a < 0.05; a += 1e-4 {
		if got, want := shrinkFactor(a), math.Exp(-a); math.Abs(got-want) > 2e-15 {
			t.Fatalf("shrinkFactor(%v) = %v, want %v", a, got, want)
		}
	}
}

func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 1000, 50000} {
		for _, nbits := range []int{3, 22, 40} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = rng.Uint64() & (1<<nbits - 1)
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			radixSort(keys, nbits)
			if !slices.Equal(keys, want) {
				t.Fatalf("%d keys of %d bits: not sorted", n, nbits)
			}
		}
	}
}
