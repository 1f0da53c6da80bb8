// Package backend is the life cycle of one run's training process, which
// every backend implements: local, ssh, slurm and agent (SPEC sections 4
// to 7; docs/DESIGN.md, "One run"). The dispatch drives it, one step
// after the other, and each step says how it ended:
//
//	exec, err := b.Prepare(ctx, run)         // device, interpreter, code
//	write exec.Spec() to spec.json
//	started, err := exec.Start(ctx)          // the process, or its offer to an agent
//	outcome, err := exec.Relay(ctx)          // events reach run.Sink until the end
//	err = exec.Cancel(ctx, grace)            // at any time between Start and Relay's end
//	collected, err := exec.Collect(ctx, res) // predictions and model files come home
//	exec.Close()                             // always, once Prepare succeeded
//
// A backend holds nothing of a run before Prepare; everything the run
// needs afterwards lives in the Execution that Prepare returns.
package backend

import (
	"context"
	"fmt"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Backend prepares runs on one kind of machine.
type Backend interface {
	// Prepare checks what the run needs (device, interpreter, code, the
	// bundle's archive) and returns the run's execution. When it fails it
	// has released whatever it held: there is nothing to close.
	Prepare(ctx context.Context, run Run) (Execution, error)
}

// Run is what a backend is given for one run. It is not changed: what a
// backend decides (the device, the parameters it adds) is in the spec its
// Execution returns.
type Run struct {
	Config  *config.Config
	Backend *config.Backend
	Dir     *rundir.Run
	// Spec is the spec as the dispatch made it from the config; SpecPath
	// is where the dispatch writes the execution's spec before Start.
	Spec     trainer.Spec
	SpecPath string
	// Sink receives what the backend sees while it works.
	Sink Sink
}

// Sink is where a backend reports: the dispatch implements it, and every
// method may be called from any goroutine.
type Sink interface {
	// Event is called for every event the training process sends, in order.
	Event(e events.Event)
	// Logf appends a line to the run log.
	Logf(format string, args ...any)
	// TrainerLine appends to the run log a line the training process
	// printed that is no event, as "trainer: LINE", cut at 4096 bytes and
	// within the run's budget of events and log (max_events_mb).
	TrainerLine(line string)
	// Step sets the step line shown by status and the page.
	Step(step string)
	// Progress sets the run's progress outside the trainer's own events
	// (a copy of the model back: phase "fetch", bytes).
	Progress(phase string, current, total float64)
	// Running says that a run that was Queued at its start has been
	// claimed and runs now (SPEC G6).
	Running(step string)
}

// Execution is one run's training process on a backend, from its start
// to its collection.
type Execution interface {
	// Spec is what the training process reads: the run's spec with the
	// device chosen and what the backend adds.
	Spec() trainer.Spec
	// Start starts the training process. Its context lives as long as the
	// process: cancelling it stops the process abruptly, where Cancel
	// stops it gracefully.
	Start(ctx context.Context) (Started, error)
	// Relay passes the process's events to the sink until it has ended,
	// and says how it ended. An error is a failure of the backend itself
	// (a lost connection, a silent agent), not of the trainer.
	Relay(ctx context.Context) (Outcome, error)
	// Cancel asks the process to stop: SIGTERM, then SIGKILL after grace.
	// Relay returns once it has stopped. A second call does nothing.
	Cancel(ctx context.Context, grace time.Duration) error
	// Collect brings the predictions and the model files that the result
	// names into the run directory.
	Collect(ctx context.Context, res events.Result) (Collected, error)
	// Close releases the execution's connections, sockets and files and
	// cleans up the far side, whatever the run's end.
	Close() error
}

// Started is how a start went.
type Started struct {
	// Queued is set when the run waits for an agent to claim it: the run
	// stays queued until the execution calls Sink.Running (SPEC G6).
	Queued bool
	// Step, when set, is the step line from the start on ("waiting for an
	// agent on lab"), written with the state, so that no reader sees the
	// one without the other.
	Step string
}

// Outcome is how the training process ended, as the backend saw it.
type Outcome struct {
	// ExitCode is the process's exit status; -1 when a signal killed it.
	ExitCode int
	// Killed is set when SIGKILL ended it.
	Killed bool
	// Signal names the signal that ended it, if one did.
	Signal string
}

// Collected is what Collect brought back.
type Collected struct {
	// ArtifactURI says where the model files are when they are not (all)
	// in the run's artifacts/; empty when they are.
	ArtifactURI string
}

// String says how the process ended, for the run log.
func (o Outcome) String() string {
	if o.Signal != "" {
		return o.Signal
	}
	return fmt.Sprintf("exit status %d", o.ExitCode)
}

// HintError is a failure with lines that say how to fix it: the run log
// shows them after the error.
type HintError struct {
	Err   error
	Hints []string
}

func (e *HintError) Error() string { return e.Err.Error() }
func (e *HintError) Unwrap() error { return e.Err }
