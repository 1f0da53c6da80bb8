package dispatch_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"potato-training/internal/testproject"
	"potato-training/lib/backend"
	"potato-training/lib/config"
	"potato-training/lib/dispatch"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// fake is a backend made of function fields: each test says what its
// training process does, and the dispatch takes it through the life
// cycle of lib/backend as it takes a real one. It stands in for the
// faults that are hard to cause for real at one exact phase; the real
// backends are in cmd/potato-dispatch's conformance suite.
type fake struct {
	prepare func(run backend.Run) error
	start   func(run backend.Run) error
	// relay runs the process: it may send events to the sink, and
	// returns how the process ended. cancelled is closed by Cancel.
	relay func(run backend.Run, cancelled <-chan struct{}) (backend.Outcome, error)

	cancels, closes atomic.Int32
}

func (f *fake) Prepare(ctx context.Context, run backend.Run) (backend.Execution, error) {
	if f.prepare != nil {
		if err := f.prepare(run); err != nil {
			return nil, err
		}
	}
	return &fakeExec{f: f, run: run, cancelled: make(chan struct{})}, nil
}

type fakeExec struct {
	f         *fake
	run       backend.Run
	cancelled chan struct{}
	once      atomic.Bool
}

func (e *fakeExec) Spec() trainer.Spec { return e.run.Spec }

func (e *fakeExec) Start(ctx context.Context) (backend.Started, error) {
	if e.f.start != nil {
		if err := e.f.start(e.run); err != nil {
			return backend.Started{}, err
		}
	}
	return backend.Started{}, nil
}

func (e *fakeExec) Relay(ctx context.Context) (backend.Outcome, error) {
	return e.f.relay(e.run, e.cancelled)
}

func (e *fakeExec) Cancel(ctx context.Context, grace time.Duration) error {
	e.f.cancels.Add(1)
	if e.once.CompareAndSwap(false, true) {
		close(e.cancelled)
	}
	return nil
}

// Collect brings home an empty predictions file.
func (e *fakeExec) Collect(ctx context.Context, res events.Result) (backend.Collected, error) {
	return backend.Collected{}, os.WriteFile(e.run.Dir.Path(rundir.PredictionsFile), nil, 0o644)
}

func (e *fakeExec) Close() error {
	e.f.closes.Add(1)
	return nil
}

var fakeResult = events.ResultEvent(events.Result{Status: "success", PredictionsFile: "predictions.jsonl"})

// sends is a relay that sends evs, then ends as out.
func sends(out backend.Outcome, evs ...events.Event) func(backend.Run, <-chan struct{}) (backend.Outcome, error) {
	return func(run backend.Run, _ <-chan struct{}) (backend.Outcome, error) {
		for _, e := range evs {
			run.Sink.Event(e)
		}
		return out, nil
	}
}

// How the training process ended becomes the run's end, phase by phase:
// the dispatch's judge, with Close called once whenever Prepare
// succeeded, and never when it failed.
func TestJudgeByPhase(t *testing.T) {
	for _, c := range []struct {
		name             string
		f                *fake
		state, code, err string
		log              string
		exit             int
		closes           int32
	}{
		{name: "success", f: &fake{relay: sends(backend.Outcome{}, fakeResult)},
			state: rundir.StateSuccess, exit: 0, closes: 1},
		{name: "result, then a failing exit", f: &fake{relay: sends(backend.Outcome{ExitCode: 3}, fakeResult)},
			state: rundir.StateSuccess, log: "warning: the training process sent a result but exited with exit status 3", closes: 1},
		{name: "error event", f: &fake{relay: sends(backend.Outcome{ExitCode: 2}, events.ErrorEvent("validation_failed", "schema s has 3 items", ""))},
			state: rundir.StateError, code: "validation_failed", err: "schema s has 3 items", exit: 1, closes: 1},
		{name: "killed without a result", f: &fake{relay: sends(backend.Outcome{ExitCode: -1, Killed: true, Signal: "signal: killed"})},
			state: rundir.StateError, code: events.CodeOutOfMemory, err: "the training process was killed (SIGKILL), which usually means the machine ran out of memory", exit: 1, closes: 1},
		{name: "no result", f: &fake{relay: sends(backend.Outcome{})},
			state: rundir.StateError, code: "no_result", err: "the training process ended (exit status 0) without a result", exit: 1, closes: 1},
		{name: "the backend fails while relaying", f: &fake{relay: func(backend.Run, <-chan struct{}) (backend.Outcome, error) {
			return backend.Outcome{}, errors.New("the ssh session to gpu ended")
		}}, state: rundir.StateError, code: "backend", err: "the ssh session to gpu ended", exit: 1, closes: 1},
		{name: "start fails", f: &fake{start: func(backend.Run) error { return errors.New("cannot start the training process: no such file") },
			relay: sends(backend.Outcome{}, fakeResult)},
			state: rundir.StateError, code: "dispatch_failed", err: "cannot start the training process: no such file", exit: 1, closes: 1},
		{name: "prepare fails", f: &fake{prepare: func(backend.Run) error { return errors.New("No GPU has 130000 MB free") },
			relay: sends(backend.Outcome{}, fakeResult)},
			state: rundir.StateError, code: "dispatch_failed", err: "No GPU has 130000 MB free", exit: 1, closes: 0},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			dir, cfg := testproject.Project(t, 40, 30, "")
			var id string
			code, err := dispatch.Run(context.Background(), dispatch.Options{ConfigPath: cfg, Trainer: "tfidf-logreg",
				Schemas: []string{"sentiment"}, Started: func(s string) { id = s },
				NewBackend: func(*config.Backend) (backend.Backend, error) { return c.f, nil }})
			if err != nil {
				t.Fatal(err)
			}
			info := testproject.Read(t, dir, id)
			log, _ := os.ReadFile(filepath.Join(testproject.Root(dir).RunDir(id), rundir.LogFile))
			if info.State != c.state || info.ErrorCode != c.code || info.Error != c.err || code != c.exit {
				t.Errorf("state %s code %q error %q exit %d; want %s %q %q %d\n%s", info.State, info.ErrorCode, info.Error, code,
					c.state, c.code, c.err, c.exit, log)
			}
			if c.log != "" && !strings.Contains(string(log), c.log) {
				t.Errorf("run log lacks %q:\n%s", c.log, log)
			}
			if got := c.f.closes.Load(); got != c.closes {
				t.Errorf("Close called %d times, want %d", got, c.closes)
			}
		})
	}
}

// A cancel while the process runs reaches the backend's Cancel, and the
// run ends cancelled once the process has stopped, whatever it sent.
func TestCancelWhileRunning(t *testing.T) {
	dir, cfg := testproject.Project(t, 40, 30, "")
	running := make(chan struct{})
	f := &fake{relay: func(run backend.Run, cancelled <-chan struct{}) (backend.Outcome, error) {
		run.Sink.Event(events.Status("fitting", "epoch 1"))
		close(running)
		<-cancelled
		return backend.Outcome{ExitCode: -1, Signal: "signal: terminated"}, nil
	}}
	ids := make(chan string, 1)
	done := make(chan int, 1)
	go func() {
		code, err := dispatch.Run(context.Background(), dispatch.Options{ConfigPath: cfg, Trainer: "tfidf-logreg",
			Schemas: []string{"sentiment"}, Started: func(s string) { ids <- s },
			NewBackend: func(*config.Backend) (backend.Backend, error) { return f, nil }})
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	id := <-ids
	<-running
	if err := dispatch.Cancel(cfg, id); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end after its cancel")
	}
	info := testproject.Read(t, dir, id)
	if info.State != rundir.StateCancelled || f.cancels.Load() < 1 || f.closes.Load() != 1 {
		t.Errorf("state %s exit %d, Cancel called %d times, Close %d times", info.State, code, f.cancels.Load(), f.closes.Load())
	}
}
