package dispatch

import (
	"fmt"
	"os"
	"sync"
	"time"

	"potato-training/lib/agent"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// Texts of the run log that users and tests match: what the dispatch
// dropped of a training process's output, and why.
const (
	msgOverBudget = "the training process has written max_events_mb (%d MB) of events and run log lines: " +
		"its further ones are dropped, but for its result, its errors and the last value of each metric; the run goes on"
	msgDropped    = "dropped past max_events_mb: %d events and lines of the training process (%.1f MB)"
	msgManySeries = "the training process sends metrics of more than %d series (a split and a name): " +
		"those of the others are dropped, from split %q name %q on"
	msgLongName = "the training process sends a metric whose split or name is over %d bytes: " +
		"such metrics are dropped, from one of split %.40q name %.40q on"
	msgSeriesDropped = "dropped %d metric events of series past the first %d, or named in over %d bytes"
)

// endReserve is the room past max_events_mb for what a run needs at its
// end: its result and error events, and the last value of each metric.
const endReserve = 4 << 20

// budget is what a run's training process may write into the run
// directory through the dispatch (max_events_mb): its events in
// events.jsonl and its lines in run.log together. Past it the dispatch
// drops what it sends, but for a result or an error, which go to the
// reserve, and the last value of each metric series, held and written at
// the end from the reserve too.
type budget struct {
	mu      sync.Mutex
	limit   int64 // bytes; 0, none
	used    int64
	extra   int64 // of endReserve
	over    bool
	dropped int64 // events and lines
	bytes   int64 // theirs
	// held is the last metric event of each series past the limit.
	held      map[string]heldEvent
	heldOrder []string
}

// take reports whether n more bytes may be written; crossed is true for
// the call that found the limit reached. A line needed at the end
// (essential) may take the reserve.
func (b *budget) take(n int, essential bool) (ok, crossed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit <= 0 {
		return true, false
	}
	if !b.over && b.used+int64(n) <= b.limit {
		b.used += int64(n)
		return true, false
	}
	crossed, b.over = !b.over, true
	if essential && b.extra+int64(n) <= endReserve {
		b.extra += int64(n)
		return true, crossed
	}
	return false, crossed
}

// drop counts n bytes not written.
func (b *budget) drop(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropped++
	b.bytes += int64(n)
}

// hold keeps e, a metric event past the limit, as its series' last value;
// the one it replaces is dropped.
func (b *budget) hold(key string, e events.Event, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[string]heldEvent{}
	}
	if old, ok := b.held[key]; ok {
		b.dropped++
		b.bytes += int64(old.n)
	} else {
		b.heldOrder = append(b.heldOrder, key)
	}
	b.held[key] = heldEvent{e, n}
}

type heldEvent struct {
	e events.Event
	n int
}

// release hands over the metric events held, in the order first held.
func (b *budget) release() []events.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]events.Event, 0, len(b.heldOrder))
	for _, k := range b.heldOrder {
		out = append(out, b.held[k].e)
	}
	b.held, b.heldOrder = nil, nil
	return out
}

// droppedText is what was dropped, for the run log; "" when nothing.
func (b *budget) droppedText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 {
		return ""
	}
	return fmt.Sprintf(msgDropped, b.dropped, float64(b.bytes)/(1<<20))
}

// seriesBound keeps the metric series of a run (events.MaxSeries).
type seriesBound struct {
	seen           map[string]bool
	dropped        int64
	many, longName bool // said in the run log
}

// admitSeries reports whether a metric event's series is one the run
// keeps, saying once in the run log why the first of the others is not.
// d.mu is held.
func (d *dispatcher) admitSeries(e events.Event) bool {
	split, name := e.String("split"), e.String("name")
	s := &d.series
	key := split + "\x00" + name
	if s.seen[key] {
		return true
	}
	switch {
	case len(split) > events.MaxMetricName || len(name) > events.MaxMetricName:
		if !s.longName {
			s.longName = true
			d.logf(msgLongName, events.MaxMetricName, split, name)
		}
	case len(s.seen) >= events.MaxSeries:
		if !s.many {
			s.many = true
			d.logf(msgManySeries, events.MaxSeries, split, name)
		}
	default:
		if s.seen == nil {
			s.seen = map[string]bool{}
		}
		s.seen[key] = true
		return true
	}
	s.dropped++
	return false
}

// onEvent appends an event to events.jsonl and follows it in run.json.
// Progress and metric events pass through a throttle (potato-events(5)):
// whatever rate a trainer sends them at, a few a second reach
// events.jsonl and run.json, and the last of each always. A metric of a
// series past events.MaxSeries is dropped; what is written is bounded by
// the budget.
func (d *dispatcher) onEvent(e events.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.finished {
		return
	}
	if e.Kind == events.KindMetric && !d.admitSeries(e) {
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
			d.trainerLogf(false, "agent: %s", e.String("msg"))
			break
		}
		d.trainerLogf(false, "trainer %s: %s", e.String("level"), e.String("msg"))
	case events.KindError:
		var f events.Failure
		if e.Decode(&f) == nil {
			d.failure = &f
			d.trainerLogf(true, "trainer error %s: %s", f.Code, f.Message)
			if f.InstallHint != "" {
				d.trainerLogf(true, "hint: %s", f.InstallHint)
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

// admit reports whether n bytes of the training process's output may be
// written, and says in the run log when the budget is reached.
func (d *dispatcher) admit(n int, essential bool) bool {
	ok, crossed := d.budget.take(n, essential)
	if crossed {
		d.logf(msgOverBudget, d.budget.limit>>20)
	}
	if !ok {
		d.budget.drop(n)
	}
	return ok
}

// trainerLogf appends to the run log a line of what the training process,
// or the agent that runs it, said: within the budget, or, essential (an
// error), its reserve.
func (d *dispatcher) trainerLogf(essential bool, format string, args ...any) {
	line := rundir.LogLine(fmt.Sprintf(format, args...))
	if d.admit(len(line), essential) {
		d.run.AppendLog(line)
	}
}

// writeEvent appends an event that passed the throttle to events.jsonl,
// within the budget; a progress event is also the run's progress in
// run.json. The throttle calls it, one event at a time, from onEvent or,
// for an event it held, later on its own.
func (d *dispatcher) writeEvent(e events.Event) error {
	var err error
	line := e.Line()
	ok, crossed := d.budget.take(len(line), e.Kind == events.KindResult || e.Kind == events.KindError)
	switch {
	case ok:
		err = d.appendEvent(line)
	case e.Kind == events.KindMetric:
		// Past the budget a metric is held: the last of its series is
		// written at the end.
		d.budget.hold(e.String("split")+"\x00"+e.String("name"), e, len(line))
	default:
		d.budget.drop(len(line))
	}
	if crossed {
		d.logf(msgOverBudget, d.budget.limit>>20)
	}
	if e.Kind == events.KindProgress {
		at := time.Now().UTC()
		p := rundir.Progress{Phase: e.String("phase"), Current: e.Number("current"), Total: e.Number("total"), EtaS: e.Number("eta_s"), At: &at}
		d.set(func(r *rundir.Record) { r.Progress = &p })
	}
	return err
}

func (d *dispatcher) appendEvent(line []byte) error {
	_, err := d.events.Write(line)
	if err != nil {
		d.logf("cannot append to events.jsonl: %v", err)
	}
	return err
}

// endEvents writes what the throttle holds; no event is written after.
// It is called with d.mu held, as the run's end is written.
// Past the budget, the last value of each metric is written then, from
// the reserve, and the run log says what was dropped.
func (d *dispatcher) endEvents() {
	if d.throttle != nil {
		_ = d.throttle.Close()
	}
	for _, e := range d.budget.release() {
		line := e.Line()
		if ok, _ := d.budget.take(len(line), true); ok {
			_ = d.appendEvent(line)
		} else {
			d.budget.drop(len(line))
		}
	}
	if s := d.budget.droppedText(); s != "" {
		d.logf("%s", s)
	}
	if n := d.series.dropped; n > 0 {
		d.logf(msgSeriesDropped, n, events.MaxSeries, events.MaxMetricName)
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

func (s sink) Event(e events.Event) { s.d.onEvent(e) }

// Logf writes a backend's own line to the run log, outside the run's
// budget.
func (s sink) Logf(format string, args ...any) { s.d.logf(format, args...) }

// maxTrainerLine bounds a line of the training process in the run log.
const maxTrainerLine = 4096

// TrainerLine writes a line the training process printed that is no
// event to the run log, within the run's budget.
func (s sink) TrainerLine(line string) {
	if len(line) > maxTrainerLine {
		line = line[:maxTrainerLine] + "..."
	}
	s.d.trainerLogf(false, "trainer: %s", line)
}

func (s sink) Step(step string) { s.d.step(step) }
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
