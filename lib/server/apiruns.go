// GET /runs and /runs/ID, and a run's cancel and retract: the runs as the API shows them.

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
)

// apiRun is a run as the API shows it: run.json's record, corrected for
// a dispatch that is gone, and the run's place in the queue.
type apiRun struct {
	rundir.Record
	// QueuePosition is 1 for the next run to start; absent for a run not
	// waiting in the queue.
	QueuePosition int `json:"queue_position,omitempty"`
}

// apiRunDetail is GET /runs/<id>.
type apiRunDetail struct {
	apiRun
	Events []json.RawMessage `json:"events"`
	Log    []string          `json:"log"`
	// MetricEvents are all the run's metric events, which the page's
	// charts draw (metricEvents).
	MetricEvents []metricEvent `json:"metric_events"`
}

// runs lists the runs, newest first. A run waits in the queue when it is
// queued and has not started: a run of an agent backend is queued again
// while it waits for an agent, but it holds the queue meanwhile.
func (a *api) runs() ([]apiRun, error) {
	infos, err := a.s.runs.List(a.s.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return []apiRun{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]apiRun, len(infos))
	pos := 0
	for i, info := range infos {
		run := apiRun{Record: info.Record}
		if !info.Finished && !info.Gone && info.State == rundir.StateQueued && info.StartedAt == nil {
			pos++
			run.QueuePosition = pos
		}
		out[len(infos)-1-i] = run
	}
	return out, nil
}

// listRuns is GET /runs, newest first; ?limit=N keeps the newest N, and
// with ?current=1 also the run executing and the next in the queue where
// they are older than those, so that a page that shows the newest runs
// still shows the run under way however many wait behind it.
func (a *api) listRuns(w http.ResponseWriter, r *http.Request) {
	limit := 0
	current := r.URL.Query().Get("current") == "1"
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			a.fail(w, errorf(http.StatusBadRequest, "limit %q is not a positive number of runs", v))
			return
		}
		limit = n
	}
	runs, err := a.runs()
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("X-Total-Count", strconv.Itoa(len(runs)))
	if limit > 0 && len(runs) > limit {
		kept := runs[:limit:limit]
		if current {
			for _, run := range runs[limit:] {
				if run.current() {
					kept = append(kept, run)
				}
			}
		}
		runs = kept
	}
	agentproto.WriteJSON(w, http.StatusOK, runs)
}

// current reports whether the run is the one under way: executing, or the
// next to start.
func (r apiRun) current() bool {
	if r.QueuePosition > 0 {
		return r.QueuePosition == 1
	}
	switch r.State {
	case rundir.StateSuccess, rundir.StateError, rundir.StateCancelled:
		return false
	}
	return true
}

// known answers 404 for an id that is no run's: not a run id, or no
// run.json under it.
func (a *api) known(id string) error {
	if !rundir.ValidID(id) {
		return errorf(http.StatusNotFound, "no run %q", id)
	}
	if _, err := os.Stat(filepath.Join(a.s.Root.RunDir(id), rundir.RecordFile)); errors.Is(err, fs.ErrNotExist) {
		return errorf(http.StatusNotFound, "no run %s", id)
	}
	return nil
}

// readRun reads one run's record, or answers 404 when there is none.
func (a *api) readRun(id string) (rundir.Info, error) {
	if !rundir.ValidID(id) {
		return rundir.Info{}, errorf(http.StatusNotFound, "no run %q", id)
	}
	info, err := a.s.Root.Read(id)
	if err != nil {
		if kerr := a.known(id); kerr != nil {
			return info, kerr
		}
	}
	return info, err
}

// run finds one run among the runs, or answers 404.
func (a *api) run(id string) (apiRun, error) {
	if err := a.known(id); err != nil {
		return apiRun{}, err
	}
	runs, err := a.runs()
	if err != nil {
		return apiRun{}, err
	}
	for _, run := range runs {
		if run.RunID == id {
			return run, nil
		}
	}
	// Listed runs are the readable ones: a record that cannot be read
	// says why.
	if _, err := a.s.Root.Read(id); err != nil {
		return apiRun{}, err
	}
	return apiRun{}, errorf(http.StatusNotFound, "no run %s", id)
}

func (a *api) getRun(w http.ResponseWriter, r *http.Request, parts []string) {
	run, err := a.run(parts[1])
	if err != nil {
		a.fail(w, err)
		return
	}
	dir := a.s.Root.RunDir(run.RunID)
	d := apiRunDetail{apiRun: run, Events: []json.RawMessage{}, Log: []string{}}
	lines, _ := rundir.TailLines(filepath.Join(dir, rundir.EventsFile), eventLines)
	for _, l := range lines {
		if json.Valid([]byte(l)) {
			d.Events = append(d.Events, json.RawMessage(l))
		}
	}
	if lines, _ := rundir.TailLines(filepath.Join(dir, rundir.LogFile), logLines); lines != nil {
		d.Log = lines
	}
	if d.MetricEvents, err = a.s.metrics.metricEvents(run.RunID, dir); err != nil {
		a.s.logf("run %s: its metric events: %v", run.RunID, err)
		d.MetricEvents = []metricEvent{}
	}
	agentproto.WriteJSON(w, http.StatusOK, d)
}

// cancelRun asks a run's dispatch to stop it, as potato-dispatch cancel
// does; the dispatch records the outcome.
func (a *api) cancelRun(w http.ResponseWriter, r *http.Request, parts []string) {
	id := parts[1]
	info, err := a.readRun(id)
	if err != nil {
		a.fail(w, err)
		return
	}
	if err := a.s.Root.Cancel(id); err != nil {
		if errors.Is(err, rundir.ErrFinished) || errors.Is(err, rundir.ErrGone) {
			err = errorf(http.StatusConflict, "%v", err)
		}
		a.fail(w, err)
		return
	}
	a.s.logf("run %s: cancel requested through the API", id)
	agentproto.WriteJSON(w, http.StatusAccepted, map[string]string{"run_id": id, "state": info.State})
}

// retractRun deletes a finished run's prelabels from Potato's store with
// potato-dispatch retract, and answers {"retracted": n}, as Potato's
// DELETE .../runs/<id>/predictions does; the run stays.
func (a *api) retractRun(w http.ResponseWriter, r *http.Request, parts []string) {
	id := parts[1]
	info, err := a.readRun(id)
	if err != nil {
		a.fail(w, err)
		return
	}
	if !info.Finished && !info.Gone {
		a.fail(w, errorf(http.StatusConflict, "run %s is %s: its dispatch writes its prelabels as it ends; cancel it, or retract them once it has ended", id, info.State))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), retractTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	// "--" ends the flags: neither the config's path nor the id can be
	// taken for one.
	err = command(ctx, a.s.Dispatch, []string{"retract", "--json", "--", a.s.ConfigPath, id}, &stdout, &stderr).Run()
	var out struct {
		Retracted *int64 `json:"retracted"`
	}
	if err == nil && json.Unmarshal(stdout.Bytes(), &out) == nil && out.Retracted != nil {
		a.s.logf("run %s: %d prelabels retracted through the API", id, *out.Retracted)
		agentproto.WriteJSON(w, http.StatusOK, map[string]int64{"retracted": *out.Retracted})
		return
	}
	msg, hints := childMessage("potato-dispatch", stderr.String())
	switch {
	case ctx.Err() != nil:
		msg = fmt.Sprintf("potato-dispatch retract did not finish within %s", retractTimeout)
	case msg == "" && err != nil:
		msg = fmt.Sprintf("potato-dispatch retract: %v", err)
	case msg == "":
		msg = "potato-dispatch retract printed no count"
	}
	a.fail(w, &apiError{code: http.StatusInternalServerError, msg: msg, hints: hints})
}
