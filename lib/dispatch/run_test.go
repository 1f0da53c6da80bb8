package dispatch_test

import (
	"context"
	"testing"
	"time"

	"potato-training/internal/testproject"
	"potato-training/lib/backend"
	"potato-training/lib/backend/local"
	"potato-training/lib/config"
	"potato-training/lib/dispatch"
	"potato-training/lib/rundir"
)

// This package's tests call it in the test process; the tests that run
// the potato-dispatch binary are in cmd/potato-dispatch.

// slowPrepare stands in for a backend whose preparation hangs (a probe
// that never answers): a fault hard to cause for real.
type slowPrepare struct{ backend.Backend }

func (slowPrepare) Prepare(ctx context.Context, _ backend.Run) (backend.Execution, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestLimitsApplyWhilePreparing(t *testing.T) {
	for _, c := range []struct {
		name, extra, state, err string
		cancel                  bool
	}{
		{"wall", "  max_wall_seconds: 1\n", rundir.StateError, "the run did not finish within max_wall_seconds (1 s)", false},
		{"cancel", "", rundir.StateCancelled, "cancelled", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, cfg := testproject.Project(t, 40, 30, c.extra)
			ids := make(chan string, 1)
			done := make(chan int, 1)
			go func() {
				code, err := dispatch.Run(context.Background(), dispatch.Options{ConfigPath: cfg, Trainer: "tfidf-logreg",
					Schemas: []string{"sentiment"}, Started: func(id string) { ids <- id },
					NewBackend: func(*config.Backend) (backend.Backend, error) { return slowPrepare{local.New()}, nil }})
				if err != nil {
					t.Error(err)
				}
				done <- code
			}()
			id := <-ids
			if c.cancel {
				testproject.WaitFor(t, "preparing", func() bool { return testproject.Read(t, dir, id).State == rundir.StateDispatching })
				if err := dispatch.Cancel(cfg, id); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("the run is still preparing")
			}
			if info := testproject.Read(t, dir, id); info.State != c.state || info.Error != c.err {
				t.Errorf("state %s error %q", info.State, info.Error)
			}
		})
	}
}
