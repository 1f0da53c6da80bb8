// Package backend is the interface every backend implements: local, ssh,
// slurm and agent (SPEC section 1). A dispatch drives one run through it:
// Prepare, Start, Wait while events are relayed, Cancel on request, and
// Collect once the training process has ended.
package backend

import (
	"context"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Job is what a backend is given for one run.
type Job struct {
	Config  *config.Config
	Backend *config.Backend
	Run     *rundir.Run
	Spec    trainer.Spec
	// SpecPath is spec.json in the run directory.
	SpecPath string
	// Event is called for every event the training process sends, in order.
	Event func(events.Event)
	// Logf appends to the run log.
	Logf func(format string, args ...any)
	// Step sets the step line shown by status and the page.
	Step func(step string)
	// Result is the process's result event, once it has sent one.
	Result *events.Result
	// ArtifactURI, when a backend sets it, says where the model files are
	// when they are not (all) in the run's artifacts/.
	ArtifactURI string
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

// Backend runs training processes somewhere.
type Backend interface {
	// Prepare checks what the run needs (device, interpreter, code) and
	// fills in the spec's limits; it may log warnings.
	Prepare(ctx context.Context, job *Job) error
	// Start starts the training process.
	Start(ctx context.Context, job *Job) error
	// Wait relays events until the process has ended.
	Wait(ctx context.Context) (Outcome, error)
	// Cancel asks the process to stop: SIGTERM, then SIGKILL after grace.
	Cancel(grace time.Duration)
	// Collect brings predictions and model files into the run directory.
	Collect(ctx context.Context, job *Job) error
}

// Closer is implemented by backends that hold a connection; the dispatch
// closes it once the run is over, whatever happened.
type Closer interface {
	Close()
}

// Claimable is implemented by a backend whose run waits for an agent to
// claim it (agent backends): the run stays queued until then (SPEC G6).
type Claimable interface {
	Claimed() bool
}
