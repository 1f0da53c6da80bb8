package writeback

import (
	"encoding/json"
	"math"
	"strconv"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

// An ordinal (likert) schema's held-out score is a nominal one over the
// points of its scale (accuracy, macro-F1, Cohen's kappa, each point's
// figures and the confusion matrix), with what an ordered scale needs
// beside it:
//
//   - MAE, the mean absolute error in scale points: the mean over the test
//     items of how many points the predicted point is from the gold one
//     (points are the scale's positions, 1 apart, so on a scale of labels
//     1 to 5 a point is a unit of the scale);
//   - QWK, the quadratic-weighted kappa (Cohen 1968): 1 - sum(w O) / sum(w
//     E), O the counts of gold point i predicted j, E those chance gives
//     (the product of the two margins over N), w = (i-j)²/(K-1)²; 0 where
//     sum(w E) is 0, where it is undefined;
//   - each point's MAE over the items whose gold label it is.
//
// A test item with no prediction, or a predicted label not on the scale,
// counts for MAE and QWK as a prediction of the point farthest from its
// gold one: the worst it could be, so that predicting nothing never
// scores well.

// ordinalScale is the scale of schema s: its labels, or, for a schema
// configured with neither labels nor size, the numbers of the gold labels
// and the predictions, in order.
func ordinalScale(s bundle.Schema, gold, pred map[string]string) []string {
	if len(s.Labels) > 0 {
		return s.Labels
	}
	var vs []any
	for _, m := range []map[string]string{gold, pred} {
		for _, v := range m {
			vs = append(vs, v)
		}
	}
	return bundle.ObservedScale(vs)
}

// ordinalLabel is the scale's label of an ordinal target or predicted
// label: the label it names (bundle.Point), or, on a scale without labels,
// its number written as strconv's shortest form. "" when it is neither.
func ordinalLabel(labels []string, v any) string {
	if len(labels) > 0 {
		if p, ok := bundle.Point(labels, v); ok {
			return labels[p]
		}
		return ""
	}
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		if f, err := strconv.ParseFloat(x, 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	return ""
}

// ordinalGold reads an ordinal target from its JSON.
func ordinalGold(labels []string, raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return ordinalLabel(labels, v)
}

// scoreOrdinal scores an ordinal schema (see above). gold and pred hold
// labels of the scale (pred "" or absent for none).
func scoreOrdinal(s bundle.Schema, gold, pred map[string]string) SchemaScore {
	sc := scoreNominal(gold, pred)
	sc.Kind = config.KindOrdinal
	scale := ordinalScale(s, gold, pred)
	mae, qwk, per := ordinalFigures(scale, gold, pred)
	sc.MAE, sc.QWK = &mae, &qwk
	sc.Labels, sc.Confusion = labelFigures(bundle.Schema{Name: s.Name, Kind: config.KindNominal, Labels: scale}, gold, pred)
	for i := range sc.Labels {
		if m, ok := per[sc.Labels[i].Label]; ok {
			sc.Labels[i].MAE = &m
		}
	}
	return sc
}

// ordinalFigures are the MAE, the QWK and each gold point's MAE of pred
// against gold on scale.
func ordinalFigures(scale []string, gold, pred map[string]string) (mae, qwk float64, per map[string]float64) {
	k := len(scale)
	index := make(map[string]int, k)
	for i, l := range scale {
		index[l] = i
	}
	obs := make([]float64, k*k)
	sumErr := make([]float64, k)
	nGold := make([]int, k)
	n := 0
	var total float64
	for id, g := range gold {
		gi, ok := index[g]
		if !ok {
			continue
		}
		pi, ok := index[pred[id]]
		if !ok {
			pi = 0
			if gi < k-1-gi {
				pi = k - 1
			}
		}
		e := math.Abs(float64(gi - pi))
		total += e
		sumErr[gi] += e
		nGold[gi]++
		obs[gi*k+pi]++
		n++
	}
	per = map[string]float64{}
	for i, l := range scale {
		if nGold[i] > 0 {
			per[l] = sumErr[i] / float64(nGold[i])
		}
	}
	if n == 0 || k < 2 {
		return 0, 0, per
	}
	mae = total / float64(n)
	rows, cols := make([]float64, k), make([]float64, k)
	for i := range k {
		for j := range k {
			rows[i] += obs[i*k+j]
			cols[j] += obs[i*k+j]
		}
	}
	var num, den float64
	for i := range k {
		for j := range k {
			w := float64((i-j)*(i-j)) / float64((k-1)*(k-1))
			num += w * obs[i*k+j]
			den += w * rows[i] * cols[j] / float64(n)
		}
	}
	if den > 0 {
		qwk = 1 - num/den
	}
	return mae, qwk, per
}

// scoredKind is whether Score scores schemas of kind k.
func scoredKind(k config.Kind) bool {
	return k == config.KindNominal || k == config.KindMultilabel || k == config.KindOrdinal
}

// ordinalScales are the labels of the ordinal schemas of schemas, by
// name (nil for a schema without labels).
func ordinalScales(schemas []bundle.Schema) map[string][]string {
	out := map[string][]string{}
	for _, s := range schemas {
		if s.Ordinal() {
			out[s.Name] = s.Labels
		}
	}
	return out
}
