// Package agent is the backend of a machine the annotation server cannot
// reach (SPEC section 7): the run waits, queued, until an agent of the
// backend claims it through potato-server, which proxies the agent's
// requests to this dispatch's socket. The model stays on the agent's
// machine; the predictions and the result come back.
package agent

import (
	"context"
	"fmt"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	"potato-training/lib/backend/remote"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Step lines and messages of an agent run (SPEC A4, G6, G9, F10).
const (
	StepWaiting  = "waiting for an agent on %s"
	msgNoWord    = "No word from the agent on %s for %d seconds"
	msgNoAgent   = "no agent of backend %s claimed the run within %d seconds (queue_timeout_s)"
	hintNoAgent  = "start one on the training machine: potato training agent --server URL --backend %s (potato training check %s CONFIG shows its token and last_seen)"
	stepClaimed  = "running on %s"
	msgModelStay = "the model stays on the agent's machine: %s"
)

// Backend serves runs to the agents of one agent backend.
type Backend struct {
	b *config.Backend
}

// New returns the backend of b.
func New(b *config.Backend) *Backend {
	return &Backend{b: b}
}

// execution is one run, served until an agent claims it and reports.
type execution struct {
	b      *config.Backend
	run    remote.Run
	queued time.Time
}

// Prepare packs the bundle. The agent's machine chooses its own device,
// except for a trainer that uses no GPU, which trains on the CPU.
func (a *Backend) Prepare(ctx context.Context, run backend.Run) (backend.Execution, error) {
	root, err := rundir.Open(run.Config.TrainingDir())
	if err != nil {
		return nil, err
	}
	spec := run.Spec
	spec.Limits.Device = "auto"
	if !trainer.UsesGPU(spec.Trainer) {
		spec.Limits.Device = "cpu"
	}
	sum, n, err := bundle.PackFile(run.Dir.Path(rundir.BundleDir), run.Dir.Path(rundir.BundleArchive))
	if err != nil {
		return nil, fmt.Errorf("packing the bundle: %w", err)
	}
	e := &execution{b: a.b}
	e.run = remote.Run{Run: run, Spec: spec, Bundle: agentproto.BundleInfo{Bytes: n, SHA256: sum},
		HeartbeatTimeoutS: a.b.HeartbeatTimeoutS, Where: a.b.Name,
		// The backend's current token is good for the claim that hands
		// the run out; the run's own token for everything after it.
		AuthorizeClaim: func(tok string) bool { return root.CheckToken(a.b.Name, tok) },
		// A cancelled run is no longer handed out.
		Accept: func(req agentproto.ClaimRequest) bool { return req.Backend == a.b.Name && e.run.CancelAt().IsZero() },
		OnClaim: func(req agentproto.ClaimRequest) {
			run.Sink.Logf("the agent on %s claimed the run (backend %s, workdir %s)", req.Host, a.b.Name, req.Workdir)
			run.Sink.Running(fmt.Sprintf(stepClaimed, req.Host))
		}}
	return e, nil
}

func (e *execution) Spec() trainer.Spec { return e.run.Spec }

// Start serves the run on its socket, where potato-server hands it to an
// agent; the run is queued until one claims it.
func (e *execution) Start(ctx context.Context) (backend.Started, error) {
	if err := e.run.Serve(""); err != nil {
		return backend.Started{}, err
	}
	e.queued = time.Now()
	e.run.Run.Sink.Logf("waiting for an agent of backend %s to claim the run", e.b.Name)
	return backend.Started{Queued: true, Step: fmt.Sprintf(StepWaiting, e.b.Name)}, nil
}

// Relay follows the run: the queue timeout while no agent has claimed it
// (G6), then the heartbeat (G9) until the agent's result, and a cancel's
// grace (S10). The events come through the socket as the agent posts them.
func (e *execution) Relay(ctx context.Context) (backend.Outcome, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	hb := time.Duration(e.b.HeartbeatTimeoutS) * time.Second
	qt := time.Duration(e.b.QueueTimeoutS) * time.Second
	for {
		select {
		case <-e.run.Done():
			return e.outcome()
		case <-tick.C:
			claimed, cancelAt := e.run.Claimed(), e.run.CancelAt()
			switch {
			case !cancelAt.IsZero() && (!claimed || time.Now().After(cancelAt)):
				// Unclaimed, no agent needs telling.
				return backend.Outcome{ExitCode: -1, Signal: "cancelled"}, nil
			case !claimed && qt > 0 && time.Since(e.queued) > qt:
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoAgent+"; "+hintNoAgent, e.b.Name, e.b.QueueTimeoutS, e.b.Name, e.b.Name)
			case claimed && hb > 0 && e.run.Silence() > hb:
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoWord, e.b.Name, e.b.HeartbeatTimeoutS)
			}
		case <-ctx.Done():
			return backend.Outcome{ExitCode: -1}, ctx.Err()
		}
	}
}

func (e *execution) outcome() (backend.Outcome, error) {
	res := e.run.Reported()
	out := remote.Outcome(res)
	switch {
	case res.Failed() && !e.run.CancelAt().IsZero():
		out.Signal = "cancelled"
	case res.Failed() && out.Signal == "":
		// The agent stopped the job itself (its link was gone, G9), could
		// not run it, or could not hand over its predictions (413): the run
		// fails with the agent's words, whatever the trainer reported.
		return backend.Outcome{ExitCode: -1}, fmt.Errorf("the agent on %s: %s", e.b.Name, res.Error)
	}
	return out, nil
}

// Cancel is answered in the reply to the agent's next post; an unclaimed
// run ends at once.
func (e *execution) Cancel(ctx context.Context, grace time.Duration) error {
	e.run.Cancel(grace)
	return nil
}

// Collect has nothing to copy: the model stays on the agent's machine
// (G1, G8) and the predictions came with the agent's upload.
func (e *execution) Collect(ctx context.Context, _ events.Result) (backend.Collected, error) {
	var c backend.Collected
	if res := e.run.Reported(); res != nil && res.ArtifactURI != "" {
		c.ArtifactURI = res.ArtifactURI
		e.run.Run.Sink.Logf(msgModelStay, res.ArtifactURI)
	}
	return c, nil
}

// Close stops serving the run.
func (e *execution) Close() error {
	e.run.Close()
	return nil
}
