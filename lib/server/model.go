package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"

	"potato-training/lib/agentproto"
	"potato-training/lib/report"
	"potato-training/lib/rundir"
)

// maxSeriesPoints is the most points of one metric series (a split and a
// name) that GET /runs/<id> gives; a longer series is thinned evenly, its
// first and last points kept, so that a chart of a long run stays small.
const maxSeriesPoints = 2000

// metricEvent is one metric event of a run, as the page's charts draw it.
type metricEvent struct {
	Split string  `json:"split"`
	Name  string  `json:"name"`
	Step  float64 `json:"step"`
	Value float64 `json:"value"`
}

// metricEvents reads every metric event of the run in dir, from
// events.jsonl or its archive, in the order written; a series over
// maxSeriesPoints is thinned. A line that is no metric event with a
// numeric step and value is skipped.
func metricEvents(dir string) ([]metricEvent, error) {
	f, err := rundir.OpenEvents(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []metricEvent{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct{ split, name string }
	series := map[key][]int{}
	all := []metricEvent{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 2<<20)
	for sc.Scan() {
		var e struct {
			Event string   `json:"event"`
			Split string   `json:"split"`
			Name  string   `json:"name"`
			Step  *float64 `json:"step"`
			Value *float64 `json:"value"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Event != "metric" || e.Step == nil || e.Value == nil {
			continue
		}
		k := key{e.Split, e.Name}
		series[k] = append(series[k], len(all))
		all = append(all, metricEvent{Split: e.Split, Name: e.Name, Step: *e.Step, Value: *e.Value})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	drop := map[int]bool{}
	for _, idx := range series {
		n := len(idx)
		if n <= maxSeriesPoints {
			continue
		}
		keep := map[int]bool{}
		for i := range maxSeriesPoints {
			keep[i*(n-1)/(maxSeriesPoints-1)] = true
		}
		for i, at := range idx {
			if !keep[i] {
				drop[at] = true
			}
		}
	}
	if len(drop) == 0 {
		return all, nil
	}
	kept := make([]metricEvent, 0, len(all)-len(drop))
	for i, e := range all {
		if !drop[i] {
			kept = append(kept, e)
		}
	}
	return kept, nil
}

// acceptance is GET /report: potato-dispatch report --json's answer, for
// the page's panel; ?run= and ?schema= narrow it as --run and --schema do.
func (a *api) acceptance(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	opt := report.Options{RunID: q.Get("run"), Schema: q.Get("schema")}
	if opt.RunID != "" && !rundir.ValidID(opt.RunID) {
		a.fail(w, errorf(http.StatusNotFound, "no run %q", opt.RunID))
		return
	}
	if _, ok := a.s.Config.Scheme(opt.Schema); opt.Schema != "" && !ok {
		a.fail(w, errorf(http.StatusBadRequest, "schema %q is not in annotation_schemes of the config", opt.Schema))
		return
	}
	rep, err := report.BuildAcceptance(a.s.Config, opt)
	if errors.Is(err, report.ErrNoStore) {
		a.fail(w, errorf(http.StatusNotFound, "%v", err))
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	agentproto.WriteJSON(w, http.StatusOK, rep)
}
