package project

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"potato-training/lib/config"
)

// Aggregation methods, as model_training.aggregation names them.
const (
	Consensus = "consensus"
	Majority  = "majority"
)

// Dawid-Skene settings (FORMATS.md): at most dsMaxIter EM rounds, stopping
// once the log-likelihood moves by less than dsTol. dsSmooth is added to every
// count so that a class an annotator was never seen to give keeps a small
// probability instead of vetoing it.
const (
	dsMaxIter = 100
	dsTol     = 1e-6
	dsSmooth  = 0.01
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

// Resolve agrees one target per item and schema from the annotators' votes.
//
// Majority votes on the target (not on the raw {label: value} map, so that
// {"3": "3"} and {"3": "true"} are the same likert answer); an annotator
// whose map yields no target does not vote, and a tie goes to the target of
// the first annotator seen.
//
// Consensus runs Dawid-Skene EM on each nominal schema that more than one
// annotator voted on, starting from the majority vote; its classes are the
// scheme's configured labels followed by any other label observed, sorted.
// Multilabel, ordinal, continuous and span schemas have no confusion matrix
// to estimate, so consensus resolves them by majority. The empty method is
// Consensus, Potato's default.
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
	done := make(map[string]bool)
	for _, s := range a.Schemes {
		if done[s.Name] {
			continue
		}
		done[s.Name] = true
		var ids []string
		voters := make(map[int]bool)
		for id, m := range a.votes {
			if vs := m[s.Name]; len(vs) > 0 {
				ids = append(ids, id)
				for _, v := range vs {
					voters[v.Annotator] = true
				}
			}
		}
		if len(ids) == 0 {
			continue
		}
		sort.Strings(ids)
		var st SchemaStats
		if method == Consensus && s.Kind == config.KindNominal && len(voters) > 1 {
			st = a.resolveDawidSkene(r, s, ids)
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
		t, disputed := majority(a.votes[id][schema])
		r.set(id, schema, t)
		st.Items++
		if disputed {
			st.Disputed++
		}
	}
	return st
}

// majority returns the most common target among votes (in annotator order),
// the earliest on a tie, and whether the votes disagreed at all.
func majority(votes []Vote) (winner any, disputed bool) {
	keys := make([]string, len(votes))
	counts := make(map[string]int, len(votes))
	for i, v := range votes {
		keys[i] = targetKey(v.Target)
		counts[keys[i]]++
	}
	best, bestN := 0, 0
	for i, k := range keys {
		if n := counts[k]; n > bestN {
			best, bestN = i, n
		}
	}
	return votes[best].Target, len(counts) > 1
}

// targetKey renders a target so that equal targets have equal keys.
func targetKey(t any) string {
	switch x := t.(type) {
	case string:
		return "s" + x
	case float64:
		return "f" + strconv.FormatFloat(x, 'g', -1, 64)
	case []string:
		return "m" + strings.Join(x, "\x00")
	}
	b, _ := json.Marshal(t)
	return "j" + string(b)
}

func (a *Annotations) resolveDawidSkene(r *Resolution, s config.Scheme, ids []string) SchemaStats {
	var classes []string
	index := make(map[string]int)
	addClass := func(c string) {
		if _, ok := index[c]; !ok {
			index[c] = len(classes)
			classes = append(classes, c)
		}
	}
	for _, l := range s.Labels {
		addClass(l)
	}
	var extra []string
	for _, id := range ids {
		for _, v := range a.votes[id][s.Name] {
			if c := v.Target.(string); !containsString(extra, c) {
				if _, ok := index[c]; !ok {
					extra = append(extra, c)
				}
			}
		}
	}
	sort.Strings(extra)
	for _, c := range extra {
		addClass(c)
	}

	obs := make([][]observation, len(ids))
	start := make([]int, len(ids))
	st := SchemaStats{Method: "dawid-skene"}
	for i, id := range ids {
		votes := a.votes[id][s.Name]
		for _, v := range votes {
			obs[i] = append(obs[i], observation{annotator: v.Annotator, class: index[v.Target.(string)]})
		}
		w, disputed := majority(votes)
		start[i] = index[w.(string)]
		if disputed {
			st.Disputed++
		}
	}
	res := dawidSkene(obs, start, len(a.Annotators), len(classes), dsMaxIter, dsTol)
	for i, id := range ids {
		r.set(id, s.Name, classes[res.labels[i]])
		st.Items++
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
	confusion   [][][]float64 // [annotator][true class][given class]
	reliability []float64     // per annotator; NaN for one with no observation
	iterations  int
	converged   bool
}

// dawidSkene estimates each item's true class from obs[item] (Dawid and
// Skene, 1979). It starts from the classes in start (the majority vote),
// then alternates the M-step (class priors and each annotator's confusion
// matrix from the current posteriors, with dsSmooth added to every count)
// and the E-step (each item's posterior from the prior and the confusion
// rows of its votes), for at most maxIter rounds, stopping early once the
// log-likelihood of the votes changes by less than tol, as Potato's own
// implementation does. Where two classes end level, the starting class
// wins.
func dawidSkene(obs [][]observation, start []int, nAnnotators, k, maxIter int, tol float64) dsResult {
	n := len(obs)
	post := make([][]float64, n)
	for i := range post {
		post[i] = make([]float64, k)
		post[i][start[i]] = 1
	}
	prior := make([]float64, k)
	conf := make([][][]float64, nAnnotators)
	den := make([][]float64, nAnnotators)
	for j := range conf {
		conf[j] = make([][]float64, k)
		for c := range conf[j] {
			conf[j][c] = make([]float64, k)
		}
		den[j] = make([]float64, k)
	}
	logConf := make([][][]float64, nAnnotators)
	for j := range logConf {
		logConf[j] = make([][]float64, k)
		for c := range logConf[j] {
			logConf[j][c] = make([]float64, k)
		}
	}
	logPrior := make([]float64, k)
	logp := make([]float64, k)
	res := dsResult{}
	prevLL := 0.0
	for res.iterations < maxIter {
		res.iterations++

		// M-step.
		for c := range prior {
			prior[c] = dsSmooth
		}
		for j := range conf {
			for c := range conf[j] {
				for l := range conf[j][c] {
					conf[j][c][l] = dsSmooth
				}
				den[j][c] = dsSmooth * float64(k)
			}
		}
		for i, p := range post {
			for c, pc := range p {
				prior[c] += pc
				for _, o := range obs[i] {
					conf[o.annotator][c][o.class] += pc
					den[o.annotator][c] += pc
				}
			}
		}
		for c := range prior {
			prior[c] /= float64(n) + dsSmooth*float64(k)
			logPrior[c] = math.Log(prior[c])
		}
		for j := range conf {
			for c := range conf[j] {
				for l := range conf[j][c] {
					conf[j][c][l] /= den[j][c]
					logConf[j][c][l] = math.Log(conf[j][c][l])
				}
			}
		}

		// E-step, in logs so that many votes do not underflow.
		ll := 0.0
		for i, p := range post {
			top := math.Inf(-1)
			for c := range logp {
				logp[c] = logPrior[c]
				for _, o := range obs[i] {
					logp[c] += logConf[o.annotator][c][o.class]
				}
				top = math.Max(top, logp[c])
			}
			sum := 0.0
			for c := range logp {
				logp[c] = math.Exp(logp[c] - top)
				sum += logp[c]
			}
			for c := range p {
				p[c] = logp[c] / sum
			}
			ll += top + math.Log(sum)
		}
		if res.iterations > 1 && math.Abs(ll-prevLL) < tol {
			res.converged = true
			break
		}
		prevLL = ll
	}

	res.labels = make([]int, n)
	for i, p := range post {
		best := start[i]
		for c, pc := range p {
			if pc > p[best]+1e-12 {
				best = c
			}
		}
		res.labels[i] = best
	}
	res.reliability = make([]float64, nAnnotators)
	seen := make([]bool, nAnnotators)
	for _, item := range obs {
		for _, o := range item {
			seen[o.annotator] = true
		}
	}
	for j := range res.reliability {
		if !seen[j] {
			res.reliability[j] = math.NaN()
			continue
		}
		for c := range prior {
			res.reliability[j] += prior[c] * conf[j][c][c]
		}
	}
	res.posterior, res.prior, res.confusion = post, prior, conf
	return res
}
