package project

import (
	"fmt"
	"math"
	"sort"
)

// Aggregation methods, as model_training.aggregation names them.
const (
	Consensus = "consensus"
	Majority  = "majority"
)

// Dawid-Skene settings, Potato's: at most dsMaxIter EM rounds, stopping
// once the log-likelihood moves by less than dsTol.
const (
	dsMaxIter = 100
	dsTol     = 1e-6
)

// Resolution holds one agreed target per item and schema.
type Resolution struct {
	targets map[string]map[string]any
	Stats   Stats
}

// Stats describes how a Resolution came about.
type Stats struct {
	Method     string // Consensus or Majority, as asked
	Annotators int
	Items      int                    // items with at least one target
	Schemas    map[string]SchemaStats // by name, for every scheme with a vote
}

// SchemaStats describes how one schema's targets were resolved.
type SchemaStats struct {
	Method     string // "majority" or "dawid-skene": what was used
	Items      int    // items with a target
	Disputed   int    // items whose annotators did not all give the same target
	Iterations int    // Dawid-Skene EM rounds run
	Converged  bool   // Dawid-Skene stopped under the tolerance
	// Reliability is each annotator's estimated accuracy (the diagonal of
	// their confusion matrix, weighted by the class priors), by annotator id.
	// Dawid-Skene only.
	Reliability map[string]float64
}

// Target returns the resolved target of one item for one schema.
func (r *Resolution) Target(itemID, schema string) (any, bool) {
	t, ok := r.targets[itemID][schema]
	return t, ok
}

// Targets returns every resolved target of one item, by schema; nil when it
// has none. The map belongs to the Resolution.
func (r *Resolution) Targets(itemID string) map[string]any {
	return r.targets[itemID]
}

// Retain drops the votes on every item keep says no to. Potato's training
// resolves the items of the project's data files only, so a vote on an item
// no longer there (an older data file's) must not weigh in Dawid-Skene's
// estimate of its annotator; call Retain with the data files' ids before
// Resolve. Whether consensus has more than one annotator to weigh still
// counts every annotator with a label anywhere, as Potato counts them.
func (a *Annotations) Retain(keep func(id string) bool) {
	for id := range a.votes {
		if !keep(id) {
			delete(a.votes, id)
		}
	}
}

// Has is whether anyone voted on the item, with a target or without.
func (a *Annotations) Has(id string) bool {
	_, ok := a.votes[id]
	return ok
}

// Resolve agrees one target per item and schema from the annotators'
// votes, as Potato's training code does (FORMATS.md "Annotations").
//
// Both methods compare whole value maps (Vote.Key), not targets: {"a":
// "true"} and {"a": "a"} are different answers to them, as to Potato. The
// winning map's target is the item's; when it has none (nothing chosen,
// two radio labels), the item has no target for that schema.
//
// Majority takes the map given most often, the first annotator's on a tie.
//
// Consensus runs Dawid-Skene EM (Potato's dawid_skene) on every schema
// once more than one annotator has annotated anything; its classes are the
// distinct maps in sorted key order. With a single annotator it is
// majority. The empty method is Consensus, Potato's default.
func (a *Annotations) Resolve(method string) (*Resolution, error) {
	switch method {
	case "":
		method = Consensus
	case Consensus, Majority:
	default:
		return nil, fmt.Errorf("unknown aggregation %q (want %q or %q)", method, Consensus, Majority)
	}
	r := &Resolution{
		targets: make(map[string]map[string]any),
		Stats: Stats{
			Method:     method,
			Annotators: len(a.Annotators),
			Schemas:    make(map[string]SchemaStats),
		},
	}
	useDS := method == Consensus && a.active > 1
	done := make(map[string]bool)
	for _, s := range a.Schemes {
		if done[s.Name] {
			continue
		}
		done[s.Name] = true
		var ids []string
		for id, m := range a.votes {
			if len(m[s.Name]) > 0 {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			continue
		}
		sort.Strings(ids)
		var st SchemaStats
		if useDS {
			st = a.resolveDawidSkene(r, s.Name, ids)
		} else {
			st = a.resolveMajority(r, s.Name, ids)
		}
		r.Stats.Schemas[s.Name] = st
	}
	r.Stats.Items = len(r.targets)
	return r, nil
}

func (r *Resolution) set(itemID, schema string, t any) {
	m := r.targets[itemID]
	if m == nil {
		m = make(map[string]any, 1)
		r.targets[itemID] = m
	}
	m[schema] = t
}

func (a *Annotations) resolveMajority(r *Resolution, schema string, ids []string) SchemaStats {
	st := SchemaStats{Method: "majority"}
	for _, id := range ids {
		votes := a.votes[id][schema]
		w := majority(votes)
		if disputed(votes) {
			st.Disputed++
		}
		if w.Target != nil {
			r.set(id, schema, w.Target)
			st.Items++
		}
	}
	return st
}

// majority returns the vote whose map is given most often, in annotator
// order the earliest on a tie (Potato's Counter.most_common(1)).
func majority(votes []Vote) Vote {
	counts := make(map[string]int, len(votes))
	for _, v := range votes {
		counts[v.Key]++
	}
	best := 0
	for i, v := range votes {
		if counts[v.Key] > counts[votes[best].Key] {
			best = i
		}
	}
	return votes[best]
}

// disputed is whether the votes give more than one map.
func disputed(votes []Vote) bool {
	for _, v := range votes[1:] {
		if v.Key != votes[0].Key {
			return true
		}
	}
	return false
}

func (a *Annotations) resolveDawidSkene(r *Resolution, schema string, ids []string) SchemaStats {
	target := make(map[string]any) // key -> target, the same for every vote of a key
	for _, id := range ids {
		for _, v := range a.votes[id][schema] {
			target[v.Key] = v.Target
		}
	}
	classes := make([]string, 0, len(target))
	for k := range target {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	index := make(map[string]int, len(classes))
	for c, k := range classes {
		index[k] = c
	}

	obs := make([][]observation, len(ids))
	st := SchemaStats{Method: "dawid-skene"}
	for i, id := range ids {
		votes := a.votes[id][schema]
		for _, v := range votes {
			obs[i] = append(obs[i], observation{annotator: v.Annotator, class: index[v.Key]})
		}
		if disputed(votes) {
			st.Disputed++
		}
	}
	res := dawidSkene(obs, len(a.Annotators), len(classes), dsMaxIter, dsTol)
	for i, id := range ids {
		if t := target[classes[res.labels[i]]]; t != nil {
			r.set(id, schema, t)
			st.Items++
		}
	}
	st.Iterations, st.Converged = res.iterations, res.converged
	st.Reliability = make(map[string]float64)
	for j, rel := range res.reliability {
		if !math.IsNaN(rel) {
			st.Reliability[a.Annotators[j].ID] = rel
		}
	}
	return st
}

// observation is one annotator's class for one item.
type observation struct{ annotator, class int }

type dsResult struct {
	labels      []int       // per item, the class of highest posterior
	posterior   [][]float64 // per item, per class
	prior       []float64
	confusion   [][][]float64 // [annotator][true class][given class]; nil for one with no observation
	reliability []float64     // per annotator; NaN for one with no observation
	iterations  int
	converged   bool
}

// dawidSkene estimates each item's true class from obs[item] (Dawid and
// Skene, 1979), step for step as Potato's dawid_skene does, so that the
// same votes give the same classes:
//
//   - one class only: every item gets it, after no round;
//   - the posteriors start at each item's vote frequencies;
//   - the M-step takes the class priors from the summed posteriors and each
//     annotator's confusion rows from the posteriors of the items they
//     voted on, without smoothing; a row with no weight is uniform;
//   - the E-step multiplies the prior by the confusion entries of the
//     item's votes, in annotator order, and normalises; an item whose
//     product is 0 for every class gets uniform posteriors;
//   - EM stops after maxIter rounds, or once the log-likelihood of the
//     votes has moved by less than tol since the round before;
//   - an item's class is the first of highest posterior in class order.
//
// Sums run left to right in item, then annotator order, as CPython's sum
// before 3.12 adds. Products are not fused into multiply-adds.
func dawidSkene(obs [][]observation, nAnnotators, k, maxIter int, tol float64) dsResult {
	n := len(obs)
	res := dsResult{labels: make([]int, n), reliability: make([]float64, nAnnotators)}
	seen := make([]bool, nAnnotators)
	for _, item := range obs {
		for _, o := range item {
			seen[o.annotator] = true
		}
	}
	for j := range res.reliability {
		if !seen[j] {
			res.reliability[j] = math.NaN()
		}
	}
	post := make([][]float64, n)
	for i := range post {
		post[i] = make([]float64, k)
	}
	if k == 1 {
		for i := range post {
			post[i][0] = 1
		}
		for j := range res.reliability {
			if seen[j] {
				res.reliability[j] = 1
			}
		}
		res.posterior, res.prior, res.converged = post, []float64{1}, true
		return res
	}

	for i, item := range obs {
		total := 0.0
		for _, o := range item {
			post[i][o.class]++
			total++
		}
		for c := range post[i] {
			if total > 0 {
				post[i][c] /= total
			} else {
				post[i][c] = 1 / float64(k)
			}
		}
	}
	prior := make([]float64, k)
	num := make([][][]float64, nAnnotators)
	den := make([][]float64, nAnnotators)
	conf := make([][][]float64, nAnnotators)
	for j := range num {
		if !seen[j] {
			continue
		}
		num[j], conf[j], den[j] = make([][]float64, k), make([][]float64, k), make([]float64, k)
		for c := range num[j] {
			num[j][c], conf[j][c] = make([]float64, k), make([]float64, k)
		}
	}
	scores := make([]float64, k)
	var prevLL float64
	for res.iterations < maxIter {
		res.iterations++

		// M-step.
		clear(prior)
		for _, p := range post {
			for c, pc := range p {
				prior[c] += pc
			}
		}
		tot := 0.0
		for _, pc := range prior {
			tot += pc
		}
		if tot == 0 {
			tot = 1
		}
		for c := range prior {
			prior[c] /= tot
		}
		for j := range num {
			if seen[j] {
				clear(den[j])
				for c := range num[j] {
					clear(num[j][c])
				}
			}
		}
		for i, p := range post {
			for _, o := range obs[i] {
				for c, pc := range p {
					num[o.annotator][c][o.class] += pc
					den[o.annotator][c] += pc
				}
			}
		}
		for j := range conf {
			if !seen[j] {
				continue
			}
			for c := range conf[j] {
				for l := range conf[j][c] {
					if den[j][c] > 0 {
						conf[j][c][l] = num[j][c][l] / den[j][c]
					} else {
						conf[j][c][l] = 1 / float64(k)
					}
				}
			}
		}

		// E-step.
		ll := 0.0
		for i, p := range post {
			copy(scores, prior)
			for _, o := range obs[i] {
				for c := range scores {
					scores[c] *= conf[o.annotator][c][o.class]
				}
			}
			s := 0.0
			for _, x := range scores {
				s += x
			}
			if s > 0 {
				for c := range p {
					p[c] = scores[c] / s
				}
				ll += math.Log(s)
			} else {
				for c := range p {
					p[c] = 1 / float64(k)
				}
			}
		}
		if res.iterations > 1 && math.Abs(ll-prevLL) < tol {
			res.converged = true
			break
		}
		prevLL = ll
	}

	for i, p := range post {
		best := 0
		for c, pc := range p {
			if pc > p[best] {
				best = c
			}
		}
		res.labels[i] = best
	}
	for j := range res.reliability {
		if !seen[j] {
			continue
		}
		acc := 0.0
		for c := range prior {
			acc += float64(prior[c] * conf[j][c][c])
		}
		res.reliability[j] = acc
	}
	res.posterior, res.prior, res.confusion = post, prior, conf
	return res
}
