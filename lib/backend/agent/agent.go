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
	"potato-training/lib/rundir"
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

// Backend serves one run to the agent that claims it.
type Backend struct {
	b      *config.Backend
	run    remote.Run
	queued time.Time
}

// New returns the backend of b.
func New(b *config.Backend) *Backend {
	return &Backend{b: b}
}

// Claimed reports whether an agent has claimed the run: until then the
// run stays queued (G6).
func (a *Backend) Claimed() bool { return a.run.Job != nil && a.run.Claimed() }

// Prepare packs the bundle. The agent's machine chooses its own device.
func (a *Backend) Prepare(ctx context.Context, job *backend.Job) error {
	root, err := rundir.Open(job.Config.TrainingDir())
	if err != nil {
		return err
	}
	job.Spec.Limits.Device = "auto"
	sum, n, err := bundle.PackFile(job.Run.Path(rundir.BundleDir), job.Run.Path(rundir.BundleArchive))
	if err != nil {
		return fmt.Errorf("packing the bundle: %w", err)
	}
	a.run = remote.Run{Job: job, Bundle: agentproto.BundleInfo{Bytes: n, SHA256: sum},
		HeartbeatTimeoutS: a.b.HeartbeatTimeoutS, Where: a.b.Name,
		// The backend's current token is good for the claim that hands
		// the run out; the run's own token for everything after it.
		Authorize: func(tok string) bool { return root.CheckToken(a.b.Name, tok) },
		// A cancelled run is no longer handed out.
		Accept: func(req agentproto.ClaimRequest) bool { return req.Backend == a.b.Name && a.run.CancelAt().IsZero() },
		OnClaim: func(req agentproto.ClaimRequest) {
			job.Logf("the agent on %s claimed the run (backend %s, workdir %s)", req.Host, a.b.Name, req.Workdir)
			_ = job.Run.Update(func(r *rundir.Record) { r.State = rundir.StateRunning })
			job.Step(fmt.Sprintf(stepClaimed, req.Host))
		}}
	return nil
}

// Start serves the run on its socket, where potato-server hands it to an
// agent; the run is queued until one claims it.
func (a *Backend) Start(ctx context.Context, job *backend.Job) error {
	if err := a.run.Serve(""); err != nil {
		return err
	}
	a.queued = time.Now()
	_ = job.Run.Update(func(r *rundir.Record) { r.State = rundir.StateQueued })
	job.Step(fmt.Sprintf(StepWaiting, a.b.Name))
	job.Logf("waiting for an agent of backend %s to claim the run", a.b.Name)
	return nil
}

// Wait follows the run: the queue timeout while no agent has claimed it
// (G6), then the heartbeat (G9) until the agent's result, and a cancel's
// grace (S10).
func (a *Backend) Wait(ctx context.Context) (backend.Outcome, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	hb := time.Duration(a.b.HeartbeatTimeoutS) * time.Second
	qt := time.Duration(a.b.QueueTimeoutS) * time.Second
	for {
		select {
		case <-a.run.Done():
			return a.outcome()
		case <-tick.C:
			claimed, cancelAt := a.run.Claimed(), a.run.CancelAt()
			switch {
			case !cancelAt.IsZero() && (!claimed || time.Now().After(cancelAt)):
				// Unclaimed, no agent needs telling.
				return backend.Outcome{ExitCode: -1, Signal: "cancelled"}, nil
			case !claimed && qt > 0 && time.Since(a.queued) > qt:
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoAgent+"; "+hintNoAgent, a.b.Name, a.b.QueueTimeoutS, a.b.Name, a.b.Name)
			case claimed && hb > 0 && a.run.Silence() > hb:
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoWord, a.b.Name, a.b.HeartbeatTimeoutS)
			}
		case <-ctx.Done():
			return backend.Outcome{ExitCode: -1}, ctx.Err()
		}
	}
}

func (a *Backend) outcome() (backend.Outcome, error) {
	res := a.run.Reported()
	if res.ArtifactURI != "" {
		a.run.Job.ArtifactURI = res.ArtifactURI
	}
	out := remote.Outcome(res)
	switch {
	case res.Failed() && !a.run.CancelAt().IsZero():
		out.Signal = "cancelled"
	case res.Failed() && out.Signal == "":
		// The agent stopped the job itself (its link was gone, G9), could
		// not run it, or could not hand over its predictions (413): the run
		// fails with the agent's words, whatever the trainer reported.
		return backend.Outcome{ExitCode: -1}, fmt.Errorf("the agent on %s: %s", a.b.Name, res.Error)
	}
	return out, nil
}

// Cancel is answered in the reply to the agent's next post; an unclaimed
// run ends at once.
func (a *Backend) Cancel(grace time.Duration) { a.run.Cancel(grace) }

// Collect has nothing to copy: the model stays on the agent's machine
// (G1, G8) and the predictions came with the agent's upload.
func (a *Backend) Collect(ctx context.Context, job *backend.Job) error {
	if res := a.run.Reported(); res != nil && res.ArtifactURI != "" {
		job.ArtifactURI = res.ArtifactURI
		job.Logf(msgModelStay, res.ArtifactURI)
	}
	return nil
}

// Close stops serving the run.
func (a *Backend) Close() { a.run.Close() }
