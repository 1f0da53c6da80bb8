package dispatch

import (
	"os"
	"time"

	"potato-training/lib/agent"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// onEvent appends an event to events.jsonl and follows it in run.json.
// Progress and metric events pass through a throttle (potato-events(5)):
// whatever rate a trainer sends them at, a few a second reach
// events.jsonl and run.json, and the last of each always.
func (d *dispatcher) onEvent(e events.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return
	}
	if d.throttle == nil {
		d.throttle = events.NewThrottle(events.Interval, d.writeEvent)
	}
	_ = d.throttle.Emit(e)
	switch e.Kind {
	case events.KindStatus:
		if s := e.String("step"); s != "" {
			d.set(func(r *rundir.Record) { r.Step = s })
		}
	case events.KindLog:
		if e.String("source") == agent.SourceAgent {
			// The remote agent's own line, marked as the agent's: "agent:
			// Submitted SLURM job 4242 (...)". Unmarked, it could pass
			// for a line of the dispatch's own.
			d.logf("agent: %s", e.String("msg"))
			break
		}
		d.logf("trainer %s: %s", e.String("level"), e.String("msg"))
	case events.KindError:
		var f events.Failure
		if e.Decode(&f) == nil {
			d.failure = &f
			d.logf("trainer error %s: %s", f.Code, f.Message)
			if f.InstallHint != "" {
				d.logf("hint: %s", f.InstallHint)
			}
		}
	case events.KindResult:
		var r events.Result
		if err := e.Decode(&r); err != nil {
			d.logf("ignoring a malformed result event: %v", err)
			return
		}
		d.result = &r
		d.set(func(rec *rundir.Record) {
			rec.ModelVersion = r.ModelVersion
			if r.Precision != "" {
				rec.Precision = r.Precision
			}
			if rec.Metrics == nil {
				rec.Metrics = map[string]any{}
			}
			for k, v := range r.Metrics {
				rec.Metrics[k] = v
			}
		})
	}
}

// writeEvent appends an event that passed the throttle to events.jsonl;
// a progress event is also the run's progress in run.json. The throttle
// calls it, one event at a time, from onEvent or, for an event it held,
// later on its own.
func (d *dispatcher) writeEvent(e events.Event) error {
	_, err := d.events.Write(e.Line())
	if err != nil {
		d.logf("cannot append to events.jsonl: %v", err)
	}
	if e.Kind == events.KindProgress {
		at := time.Now().UTC()
		p := rundir.Progress{Phase: e.String("phase"), Current: e.Number("current"), Total: e.Number("total"), EtaS: e.Number("eta_s"), At: &at}
		d.set(func(r *rundir.Record) { r.Progress = &p })
	}
	return err
}

// endEvents writes what the throttle holds; no event is written after.
// It is called with d.mu held, as the run's end is written.
func (d *dispatcher) endEvents() {
	if d.throttle != nil {
		_ = d.throttle.Close()
	}
}

// openEvents opens events.jsonl, where the run's events are appended.
func (d *dispatcher) openEvents() error {
	f, err := os.OpenFile(d.run.Path(rundir.EventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.events = f
	d.mu.Unlock()
	return nil
}

// closeEvents closes events.jsonl once the run's end is written.
func (d *dispatcher) closeEvents() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.events != nil {
		d.events.Close()
		d.events = nil
	}
}

// sink is what the backend reports to: the dispatcher's run log, step
// line, progress and events.
type sink struct{ d *dispatcher }

func (s sink) Event(e events.Event)            { s.d.onEvent(e) }
func (s sink) Logf(format string, args ...any) { s.d.logf(format, args...) }
func (s sink) Step(step string)                { s.d.step(step) }
func (s sink) Progress(phase string, cur, total float64) {
	s.d.set(func(r *rundir.Record) {
		r.Progress = &rundir.Progress{Phase: phase, Current: cur, Total: total}
	})
}

// Running is a claim of a run queued for an agent: it runs now.
func (s sink) Running(step string) {
	s.d.claimMu.Lock()
	defer s.d.claimMu.Unlock()
	s.d.claimed = true
	s.d.set(func(r *rundir.Record) { r.State = rundir.StateRunning; r.Step = step })
}
