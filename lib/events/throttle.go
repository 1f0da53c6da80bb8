package events

import (
	"errors"
	"sync"
	"time"
)

// Interval is the shortest time between two progress events, and between
// two metric events of one split and name, that a throttled stream writes:
// a person reads a few updates a second, and a run of any length keeps
// its events.jsonl small.
const Interval = 250 * time.Millisecond

// ErrClosed is returned by Throttle.Emit after Close.
var ErrClosed = errors.New("event stream closed")

// Throttle passes events on at a human rate (potato-events(5)). Progress
// events, and metric events of one split and name, are passed on at most
// once per interval; one that comes sooner is held and replaced by the
// next, and the one held last is passed on when its interval is over,
// before any event of another kind, on Flush and on Close: the last
// progress and the last value of every metric always reach the stream.
// The first progress event of a phase and one with current >= total pass
// at once. Every other event passes at once, after what is held.
//
// Events held are passed on later than events that came after them: the
// stream is in order of writing, and each event keeps its own t.
type Throttle struct {
	every time.Duration
	emit  func(Event) error

	mu      sync.Mutex
	last    map[string]time.Time // when an event of the key was last passed on
	phase   string               // the phase of the last progress passed on
	held    map[string]Event
	order   []string // keys held, in the order they were first held
	timer   *time.Timer
	closed  bool
	lastErr error
}

// NewThrottle passes events on to emit, which is called with the
// throttle's lock held: one call at a time, in order.
func NewThrottle(every time.Duration, emit func(Event) error) *Throttle {
	return &Throttle{every: every, emit: emit, last: map[string]time.Time{}, held: map[string]Event{}}
}

// throttleKey is the stream an event is throttled in, "" for one that
// always passes.
func throttleKey(e Event) string {
	switch e.Kind {
	case KindProgress:
		return "progress"
	case KindMetric:
		return "metric\x00" + e.String("split") + "\x00" + e.String("name")
	}
	return ""
}

// Emit passes e on now, later or never (when a newer one replaces it).
// It returns the error of the last event passed on.
func (t *Throttle) Emit(e Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	key := throttleKey(e)
	if key == "" {
		t.flushLocked()
		return t.pass("", e)
	}
	now := time.Now()
	last, seen := t.last[key]
	due := !seen || now.Sub(last) >= t.every
	if e.Kind == KindProgress {
		if p := e.String("phase"); p != t.phase {
			// The end of the phase before, then the start of this one.
			t.flushKey(key)
			due = true
		} else if total := e.Number("total"); total > 0 && e.Number("current") >= total {
			due = true
		}
	}
	if due {
		t.drop(key) // superseded
		return t.pass(key, e)
	}
	if _, ok := t.held[key]; !ok {
		t.order = append(t.order, key)
	}
	t.held[key] = e
	t.schedule(last.Add(t.every).Sub(now))
	return t.lastErr
}

func (t *Throttle) pass(key string, e Event) error {
	if key != "" {
		t.last[key] = time.Now()
		if e.Kind == KindProgress {
			t.phase = e.String("phase")
		}
	}
	err := t.emit(e)
	t.lastErr = err
	return err
}

func (t *Throttle) drop(key string) {
	if _, ok := t.held[key]; !ok {
		return
	}
	delete(t.held, key)
	for i, k := range t.order {
		if k == key {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
}

func (t *Throttle) flushKey(key string) {
	if e, ok := t.held[key]; ok {
		t.drop(key)
		_ = t.pass(key, e)
	}
}

func (t *Throttle) flushLocked() {
	for len(t.order) > 0 {
		t.flushKey(t.order[0])
	}
}

func (t *Throttle) schedule(d time.Duration) {
	if t.timer != nil {
		return // a wake-up is set; it sets the next one
	}
	t.timer = time.AfterFunc(max(d, time.Millisecond), t.wake)
}

// wake passes on what is held and due, and sets the next wake-up.
func (t *Throttle) wake() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timer = nil
	if t.closed {
		return
	}
	now := time.Now()
	next := time.Duration(-1)
	for _, key := range append([]string(nil), t.order...) {
		left := t.last[key].Add(t.every).Sub(now)
		if left <= 0 {
			t.flushKey(key)
			continue
		}
		if next < 0 || left < next {
			next = left
		}
	}
	if next >= 0 {
		t.schedule(next)
	}
}

// Flush passes on every event held now.
func (t *Throttle) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.flushLocked()
	return t.lastErr
}

// Close passes on what is held; later events are dropped (ErrClosed).
func (t *Throttle) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.flushLocked()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	return t.lastErr
}
