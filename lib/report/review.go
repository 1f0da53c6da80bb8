package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// ReviewRule is how the report counts reviewers' verdicts; the report
// prints it and potato-dispatch(1) states it.
const ReviewRule = `Reviewers' verdicts are those of Potato's model review (assignment_strategy: model_review), ` +
	`which serves prelabelled items least confident first and stores one verdict per item, schema and reviewer ` +
	`in its model_review_verdicts table (a reviewer's later verdict on the same item and schema replaces their earlier one). ` +
	`A verdict counts for the run whose prelabel for that item and schema was the newest published when it was given: ` +
	`the run that holds the prelabel in Potato's store now, if it published before the verdict (its end, or the moment ` +
	`potato-dispatch publish wrote it), else the last run before the verdict whose predictions.jsonl has a prelabel for ` +
	`that item and schema at or above writeback.min_confidence. So a retrained model's verdicts start from none, and ` +
	`those given on the prelabels it replaced stay with the older run (potato-dispatch report --run shows them). ` +
	`Potato shows a run's prelabels from its next start: a verdict given after a run published but before that ` +
	`restart counts for the newer run. accept counts as right, correct and reject as wrong (a corrected prelabel was ` +
	`partly wrong, as in Potato's own precision). A run's precision as reviewers judged it is right over judged, with ` +
	`a 95% Wilson interval. By label, a verdict counts under the prelabel's label; for a multiselect prelabel under each ` +
	`of its labels (` + NoLabel + ` for none), as a verdict does not say which label was wrong. A verdict without a ` +
	`schema, of a schema not in the report, or on a prelabel no run published before it is not counted, and is counted as such.`

// The verdicts Potato's model review stores.
const (
	VerdictAccept  = "accept"
	VerdictCorrect = "correct"
	VerdictReject  = "reject"
)

// ReviewCount counts verdicts: in all (Name is the schema) or on the
// prelabels of one label.
type ReviewCount struct {
	Name    string `json:"name"`
	N       int    `json:"n"`
	Accept  int    `json:"accept"`
	Correct int    `json:"correct"`
	Reject  int    `json:"reject"`
	// Precision is Accept over N, bounded by the Wilson interval at 95%;
	// all three are 0 when N is 0.
	Precision float64 `json:"precision"`
	CILow     float64 `json:"ci95_low"`
	CIHigh    float64 `json:"ci95_high"`
}

func (c *ReviewCount) add(verdict string) {
	c.N++
	switch verdict {
	case VerdictAccept:
		c.Accept++
	case VerdictCorrect:
		c.Correct++
	default:
		c.Reject++
	}
}

func (c *ReviewCount) finish() {
	if c.N == 0 {
		c.Precision, c.CILow, c.CIHigh = 0, 0, 0
		return
	}
	c.Precision = float64(c.Accept) / float64(c.N)
	c.CILow, c.CIHigh = wilson(c.Accept, c.N)
}

// Review is a run's precision on one schema as Potato's reviewers judged
// it (ReviewRule).
type Review struct {
	All       ReviewCount `json:"all"`
	Reviewers int         `json:"reviewers"`
	// NReplaced counts the verdicts on prelabels the run no longer holds
	// in the store: a newer run's replaced them, or they were retracted.
	NReplaced int           `json:"n_replaced"`
	Labels    []ReviewCount `json:"labels"`
}

// RunVerdicts counts the verdicts that count for a run not in the report.
type RunVerdicts struct {
	Schema string `json:"schema"`
	RunID  string `json:"run_id"`
	N      int    `json:"n"`
}

// VerdictSummary says what became of every verdict of the project.
type VerdictSummary struct {
	// N is every verdict Potato stored for the project; Counted those
	// that count for a run and schema of the report.
	N       int `json:"n"`
	Counted int `json:"counted"`
	// OtherRuns count for runs of the report's schemas that the report
	// is not about (a run whose prelabels a newer run replaced).
	OtherRuns []RunVerdicts `json:"other_runs"`
	// NoSchema: verdicts stored without a schema. OtherSchema: of a
	// schema the report is not about. NoRun: on an item and schema for
	// which no run had published a prelabel before the verdict (or whose
	// run is gone). UnknownVerdict: neither accept, correct nor reject.
	NoSchema       int `json:"n_no_schema"`
	OtherSchema    int `json:"n_other_schema"`
	NoRun          int `json:"n_no_run"`
	UnknownVerdict int `json:"n_unknown_verdict"`
}

// reviewKey is an item and a schema.
type reviewKey struct{ item, schema string }

// runKey is a run and a schema.
type runKey struct{ run, schema string }

// candidate is a run that may have published the prelabel a verdict
// judged: a successful run of the toolkit's, newest first.
type candidate struct {
	id       string
	finished float64
	schemas  []string
	refused  map[string]bool // schemas whose prelabels the promotion gate held back
	pred     map[reviewKey][]byte
}

// reviews attributes the project's verdicts to runs (ReviewRule) and
// counts them for each (schema, run) of targets.
type reviews struct {
	cfg     *config.Config
	s       *writeback.Store
	root    *rundir.Root
	current map[string][]writeback.StoredPrelabel // by item, read once
	pub     map[string]float64                    // a run's end, unix seconds
	cands   []*candidate
	counts  map[runKey]*reviewBuilder
}

type reviewBuilder struct {
	review    Review
	reviewers map[string]bool
	labels    map[string]*ReviewCount
}

// buildReviews reads the verdicts and fills each schema's Review of a,
// and a.Verdicts and notes for the verdicts counted elsewhere.
func buildReviews(cfg *config.Config, s *writeback.Store, root *rundir.Root, a *Acceptance) error {
	vs, err := s.Verdicts(cfg.TaskName)
	if err != nil {
		return err
	}
	sum := VerdictSummary{N: len(vs), OtherRuns: []RunVerdicts{}}
	r := &reviews{cfg: cfg, s: s, root: root, current: map[string][]writeback.StoredPrelabel{},
		pub: map[string]float64{}, counts: map[runKey]*reviewBuilder{}}
	inReport := map[string]bool{}
	for _, sa := range a.Schemas {
		inReport[sa.Schema] = true
	}
	// The history of runs is read only when a verdict predates the
	// prelabel in the store now.
	var older []writeback.Verdict
	for _, v := range vs {
		switch {
		case v.Schema == "":
			sum.NoSchema++
			continue
		case !inReport[v.Schema]:
			sum.OtherSchema++
			continue
		case v.Verdict != VerdictAccept && v.Verdict != VerdictCorrect && v.Verdict != VerdictReject:
			sum.UnknownVerdict++
			continue
		}
		run, payload, ok, err := r.currentOf(v)
		if err != nil {
			return err
		}
		if !ok {
			older = append(older, v)
			continue
		}
		r.count(v, run, payload, false)
	}
	if len(older) > 0 {
		if err := r.readHistory(older); err != nil {
			return err
		}
		for _, v := range older {
			if run, payload, ok := r.historyOf(v); ok {
				r.count(v, run, payload, true)
			} else {
				sum.NoRun++
			}
		}
	}
	for i := range a.Schemas {
		sa := &a.Schemas[i]
		b := r.counts[runKey{sa.RunID, sa.Schema}]
		if b == nil {
			sa.Review = &Review{All: ReviewCount{Name: sa.Schema}, Labels: []ReviewCount{}}
			continue
		}
		delete(r.counts, runKey{sa.RunID, sa.Schema})
		b.review.All.Name = sa.Schema
		b.review.All.finish()
		b.review.Reviewers = len(b.reviewers)
		b.review.Labels = []ReviewCount{}
		for _, name := range slices.Sorted(maps.Keys(b.labels)) {
			c := b.labels[name]
			c.finish()
			b.review.Labels = append(b.review.Labels, *c)
		}
		sum.Counted += b.review.All.N
		sa.Review = &b.review
	}
	keys := slices.SortedFunc(maps.Keys(r.counts), func(x, y runKey) int {
		if c := strings.Compare(x.schema, y.schema); c != 0 {
			return c
		}
		return strings.Compare(x.run, y.run)
	})
	for _, k := range keys {
		n := r.counts[k].review.All.N
		sum.OtherRuns = append(sum.OtherRuns, RunVerdicts{Schema: k.schema, RunID: k.run, N: n})
		a.Notes = append(a.Notes, fmt.Sprintf("%s: reviewers' verdicts that count for run %s, which this report is not about (a newer run's prelabels replaced its own): %d; potato-dispatch report --run %s shows its precision as reviewers judged it", k.schema, k.run, n, k.run))
	}
	if sum.NoSchema > 0 {
		a.Notes = append(a.Notes, fmt.Sprintf("reviewers' verdicts that name no schema (the reviewer's client sent none): %d; they name no prelabel and are not counted", sum.NoSchema))
	}
	if sum.NoRun > 0 {
		a.Notes = append(a.Notes, fmt.Sprintf("reviewers' verdicts on an item and schema for which no run whose record is still here had published a prelabel before the verdict: %d; they count for no run", sum.NoRun))
	}
	if sum.UnknownVerdict > 0 {
		a.Notes = append(a.Notes, fmt.Sprintf("reviewers' verdicts that are neither accept, correct nor reject: %d; they are not counted", sum.UnknownVerdict))
	}
	a.Verdicts = sum
	return nil
}

// published is when run published the rows it holds now: its end, or
// the created_at it stamped on them when that is later (potato-dispatch
// publish stamps the moment it writes them).
func (r *reviews) published(p writeback.StoredPrelabel) float64 {
	end, ok := r.pub[p.RunID]
	if !ok {
		if row, found, err := r.s.ReadRun(r.cfg.TaskName, p.RunID); err == nil && found && row.FinishedAt > 0 {
			end = row.FinishedAt
		} else if info, err := r.root.Read(p.RunID); err == nil && info.FinishedAt != nil {
			end = unixSeconds(*info.FinishedAt)
		}
		r.pub[p.RunID] = end
	}
	return max(end, p.CreatedAt)
}

// currentOf is the run holding v's item and schema in the store now,
// when it published before v was given.
func (r *reviews) currentOf(v writeback.Verdict) (run string, payload []byte, ok bool, err error) {
	rows, seen := r.current[v.InstanceID]
	if !seen {
		if rows, err = r.s.ItemPrelabels(r.cfg.TaskName, v.InstanceID); err != nil {
			return "", nil, false, err
		}
		r.current[v.InstanceID] = rows
	}
	for _, p := range rows {
		if p.Schema == v.Schema && r.published(p) <= v.UpdatedAt {
			return p.RunID, []byte(p.Payload), true, nil
		}
	}
	return "", nil, false, nil
}

// readHistory lists the toolkit's successful runs, newest end first, and
// reads from each one's predictions.jsonl the prelabels the older
// verdicts may have judged.
func (r *reviews) readHistory(older []writeback.Verdict) error {
	want := map[reviewKey]bool{}
	schemas := map[string]bool{}
	last := 0.0
	for _, v := range older {
		want[reviewKey{v.InstanceID, v.Schema}] = true
		schemas[v.Schema] = true
		last = max(last, v.UpdatedAt)
	}
	infos, err := r.root.List()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, info := range infos {
		// Only a run that ended before one of the verdicts, in one of
		// their schemas, can have published what they judged.
		if info.State != rundir.StateSuccess || info.FinishedAt == nil || unixSeconds(*info.FinishedAt) > last ||
			!slices.ContainsFunc(info.Schemas, func(s string) bool { return schemas[s] }) {
			continue
		}
		c := &candidate{id: info.RunID, finished: unixSeconds(*info.FinishedAt), schemas: info.Schemas, refused: map[string]bool{}}
		for name, d := range info.Promotion {
			if !d.Published {
				c.refused[name] = true
			}
		}
		pred, err := readPredictions(filepath.Join(r.root.RunDir(info.RunID), rundir.PredictionsFile), want, r.cfg.Training.Writeback.MinConfidence)
		if err != nil {
			continue // a run whose predictions are gone published nothing we can name
		}
		c.pred = pred
		r.cands = append(r.cands, c)
	}
	sort.SliceStable(r.cands, func(i, j int) bool { return r.cands[i].finished > r.cands[j].finished })
	return nil
}

// historyOf is the last run, ended before v was given, whose predictions
// hold a prelabel for v's item and schema; the run holding the row now
// published after v, so it is not one.
func (r *reviews) historyOf(v writeback.Verdict) (run string, payload []byte, ok bool) {
	now := ""
	for _, p := range r.current[v.InstanceID] {
		if p.Schema == v.Schema {
			now = p.RunID
		}
	}
	k := reviewKey{v.InstanceID, v.Schema}
	for _, c := range r.cands {
		if c.id == now || c.finished > v.UpdatedAt || c.refused[v.Schema] || !slices.Contains(c.schemas, v.Schema) {
			continue
		}
		if p, ok := c.pred[k]; ok {
			return c.id, p, true
		}
	}
	return "", nil, false
}

// readPredictions reads the payloads of the wanted (item, schema) pairs
// from a predictions.jsonl, leaving out those below minConfidence (which
// write-back did not publish). A line it cannot read is skipped.
func readPredictions(path string, want map[reviewKey]bool, minConfidence float64) (map[reviewKey][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[reviewKey][]byte{}
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var p struct {
				ID         string          `json:"instance_id"`
				Schema     string          `json:"schema_name"`
				Payload    json.RawMessage `json:"payload"`
				Confidence *float64        `json:"confidence"`
			}
			if json.Unmarshal(line, &p) == nil && want[reviewKey{p.ID, p.Schema}] {
				if p.Confidence == nil && minConfidence > 0 || p.Confidence != nil && *p.Confidence < minConfidence {
					continue
				}
				out[reviewKey{p.ID, p.Schema}] = p.Payload
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// count adds v to the counts of run and v's schema; labels are the
// prelabel's, read from payload.
func (r *reviews) count(v writeback.Verdict, run string, payload []byte, replaced bool) {
	k := runKey{run, v.Schema}
	b := r.counts[k]
	if b == nil {
		b = &reviewBuilder{reviewers: map[string]bool{}, labels: map[string]*ReviewCount{}}
		r.counts[k] = b
	}
	b.review.All.add(v.Verdict)
	b.reviewers[v.Reviewer] = true
	if replaced {
		b.review.NReplaced++
	}
	kind := config.KindNominal
	if sc, ok := r.cfg.Scheme(v.Schema); ok {
		kind = sc.Kind
	}
	names, ok := writeback.PrelabelLabels(kind, payload)
	if !ok {
		return
	}
	if kind == config.KindMultilabel && len(names) == 0 {
		names = []string{NoLabel}
	}
	for _, name := range names {
		c := b.labels[name]
		if c == nil {
			c = &ReviewCount{Name: name}
			b.labels[name] = c
		}
		c.add(v.Verdict)
	}
}

func unixSeconds(t interface{ UnixNano() int64 }) float64 {
	return float64(t.UnixNano()) / 1e9
}
