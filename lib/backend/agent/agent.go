// Package agent is the backend of a machine the annotation server cannot
// reach (SPEC section 7): the run waits, queued, until an agent of the
// backend claims it through potato-server, which proxies the agent's
// requests to this dispatch's socket. The model stays on the agent's
// machine; the predictions and the result come back.
package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
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
	b    *config.Backend
	root *rundir.Root
	job  *backend.Job

	token    string
	tokenSum [32]byte
	listener net.Listener
	server   *http.Server
	bundle   agentproto.BundleInfo
	queued   time.Time

	mu        sync.Mutex
	claimed   bool
	host      string
	lastHeard time.Time
	result    *agentproto.Result
	resultCh  chan struct{}
	cancelAt  time.Time
	grace     time.Duration
}

// New returns the backend of b.
func New(b *config.Backend) *Backend {
	return &Backend{b: b, resultCh: make(chan struct{})}
}

// Claimed reports whether an agent has claimed the run: until then the
// run stays queued (G6).
func (a *Backend) Claimed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.claimed
}

// Prepare packs the bundle. The agent's machine chooses its own device.
func (a *Backend) Prepare(ctx context.Context, job *backend.Job) error {
	a.job = job
	root, err := rundir.Open(job.Config.TrainingDir())
	if err != nil {
		return err
	}
	a.root = root
	job.Spec.Limits.Device = "auto"
	sum, n, err := bundle.PackFile(job.Run.Path(rundir.BundleDir), job.Run.Path(rundir.BundleArchive))
	if err != nil {
		return fmt.Errorf("packing the bundle: %w", err)
	}
	a.bundle = agentproto.BundleInfo{Bytes: n, SHA256: sum}
	return nil
}

// Start serves the run on its socket, where potato-server hands it to an
// agent; the run is queued until one claims it.
func (a *Backend) Start(ctx context.Context, job *backend.Job) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	a.token = hex.EncodeToString(b)
	a.tokenSum = sha256.Sum256([]byte(a.token))
	l, path, err := agentproto.ListenUnix(job.Run.Path(rundir.SocketFile))
	if err != nil {
		return err
	}
	a.listener = l
	if path != job.Run.Path(rundir.SocketFile) {
		_ = job.Run.Update(func(r *rundir.Record) { r.AgentSocket = path })
	}
	h := agentproto.NewHandler(a, agentproto.HandlerOptions{Authorize: a.authorize, MaxPredictionsMB: job.Config.Training.MaxPredictionsMB})
	a.server = agentproto.Serve(l, h)
	a.mu.Lock()
	a.queued = time.Now()
	a.mu.Unlock()
	_ = job.Run.Update(func(r *rundir.Record) { r.State = rundir.StateQueued })
	job.Step(fmt.Sprintf(StepWaiting, a.b.Name))
	job.Logf("waiting for an agent of backend %s to claim the run", a.b.Name)
	return nil
}

// authorize accepts the run's own token and, for the claim that hands it
// out, the backend's current token, compared in constant time.
func (a *Backend) authorize(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1 {
		return true
	}
	return a.root.CheckToken(a.b.Name, tok)
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
		case <-a.resultCh:
			return a.outcome()
		case <-tick.C:
			a.mu.Lock()
			claimed, heard, queued, cancelAt := a.claimed, a.lastHeard, a.queued, a.cancelAt
			a.mu.Unlock()
			switch {
			case !cancelAt.IsZero() && (!claimed || time.Now().After(cancelAt)):
				// Unclaimed, no agent needs telling.
				return backend.Outcome{ExitCode: -1, Signal: "cancelled"}, nil
			case !claimed && qt > 0 && time.Since(queued) > qt:
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoAgent+"; "+hintNoAgent, a.b.Name, a.b.QueueTimeoutS, a.b.Name, a.b.Name)
			case claimed && hb > 0 && time.Since(heard) > hb:
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoWord, a.b.Name, a.b.HeartbeatTimeoutS)
			}
		case <-ctx.Done():
			return backend.Outcome{ExitCode: -1}, ctx.Err()
		}
	}
}

func (a *Backend) outcome() (backend.Outcome, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	res := a.result
	if a.job != nil && res.ArtifactURI != "" {
		a.job.ArtifactURI = res.ArtifactURI
	}
	switch {
	case res.Error != "" && !a.cancelAt.IsZero():
		return backend.Outcome{ExitCode: res.ExitCode, Signal: "cancelled"}, nil
	case strings.Contains(res.Error, "SIGKILL"):
		return backend.Outcome{ExitCode: -1, Killed: true, Signal: "killed by SIGKILL"}, nil
	case strings.HasPrefix(res.Error, "killed by"):
		return backend.Outcome{ExitCode: -1, Signal: res.Error}, nil
	case res.Error != "":
		// The agent stopped the job itself (its link was gone, G9), could
		// not run it, or could not hand over its predictions (413): the run
		// fails with the agent's words, whatever the trainer reported.
		return backend.Outcome{ExitCode: -1}, fmt.Errorf("the agent on %s: %s", a.b.Name, res.Error)
	}
	return backend.Outcome{ExitCode: res.ExitCode}, nil
}

// Cancel is answered in the reply to the agent's next post; an unclaimed
// run ends at once.
func (a *Backend) Cancel(grace time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancelAt.IsZero() {
		a.grace = grace
		a.cancelAt = time.Now().Add(grace)
	}
}

// Collect has nothing to copy: the model stays on the agent's machine
// (G1, G8) and the predictions came with the agent's upload.
func (a *Backend) Collect(ctx context.Context, job *backend.Job) error {
	a.mu.Lock()
	res := a.result
	a.mu.Unlock()
	if res != nil && res.ArtifactURI != "" {
		job.ArtifactURI = res.ArtifactURI
		job.Logf(msgModelStay, res.ArtifactURI)
	}
	return nil
}

// Close stops serving the run.
func (a *Backend) Close() {
	if a.server != nil {
		_ = a.server.Close()
	}
	if a.listener != nil {
		a.listener.Close()
	}
}

// The agentproto.Run half.

// Claim hands the run out once; later claims are answered at once with
// no run, so that potato-server can try the next queued run.
func (a *Backend) Claim(ctx context.Context, req agentproto.ClaimRequest) (*agentproto.Claim, error) {
	if req.Backend != a.b.Name {
		return nil, nil
	}
	a.mu.Lock()
	if a.claimed || !a.cancelAt.IsZero() {
		a.mu.Unlock()
		return nil, nil
	}
	a.claimed = true
	a.host = req.Host
	a.lastHeard = time.Now()
	a.mu.Unlock()
	cfg := a.job.Config.Training
	a.job.Logf("the agent on %s claimed the run (backend %s, workdir %s)", req.Host, a.b.Name, req.Workdir)
	_ = a.job.Run.Update(func(r *rundir.Record) { r.State = rundir.StateRunning })
	a.job.Step(fmt.Sprintf(stepClaimed, req.Host))
	return &agentproto.Claim{RunID: a.job.Run.ID, RunToken: a.token, Spec: a.job.Spec, GraceSeconds: cfg.GraceSeconds,
		HeartbeatTimeoutS: a.b.HeartbeatTimeoutS, MaxPredictionsMB: cfg.MaxPredictionsMB, Bundle: a.bundle}, nil
}

func (a *Backend) checkID(id string) error {
	if a.job == nil || id != a.job.Run.ID {
		return &agentproto.StatusError{Code: http.StatusNotFound, Msg: "no such run"}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.claimed {
		return &agentproto.StatusError{Code: http.StatusConflict, Msg: "the run is not claimed"}
	}
	return nil
}

// BundlePath is the packed bundle.
func (a *Backend) BundlePath(id string) (string, error) {
	if err := a.checkID(id); err != nil {
		return "", err
	}
	a.heard()
	return a.job.Run.Path(rundir.BundleArchive), nil
}

func (a *Backend) heard() {
	a.mu.Lock()
	a.lastHeard = time.Now()
	a.mu.Unlock()
}

// Events relays the agent's events and answers with the cancel flag.
func (a *Backend) Events(id string, evs []events.Event, bad []string) (agentproto.Reply, error) {
	if err := a.checkID(id); err != nil {
		return agentproto.Reply{}, err
	}
	a.mu.Lock()
	a.lastHeard = time.Now()
	cancel, grace := !a.cancelAt.IsZero(), a.grace
	a.mu.Unlock()
	for _, e := range evs {
		a.job.Event(e)
	}
	for _, l := range bad {
		if len(l) > 4096 {
			l = l[:4096] + "..."
		}
		a.job.Logf("trainer: %s", l)
	}
	if cancel {
		return agentproto.Reply{Cancel: true, GraceSeconds: int(grace / time.Second)}, nil
	}
	return agentproto.Reply{}, nil
}

// Predictions stores the uploaded predictions.jsonl, by rename once whole.
func (a *Backend) Predictions(id string, r io.Reader) error {
	if err := a.checkID(id); err != nil {
		return err
	}
	if err := agentproto.StoreFile(a.job.Run.Path(rundir.PredictionsFile), r); err != nil {
		return err
	}
	a.heard()
	return nil
}

// Result records the agent's report.
func (a *Backend) Result(id string, res agentproto.Result) error {
	if err := a.checkID(id); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.result != nil {
		return &agentproto.StatusError{Code: http.StatusConflict, Msg: "the result is in already"}
	}
	a.result = &res
	a.lastHeard = time.Now()
	if res.Error != "" {
		a.job.Logf("the agent on %s reports: exit %d: %s", a.host, res.ExitCode, res.Error)
	}
	close(a.resultCh)
	return nil
}
