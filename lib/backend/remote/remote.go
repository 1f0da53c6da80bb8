// Package remote is the dispatch's side of agent protocol v1 for one run,
// shared by the backends whose training process runs elsewhere: ssh and
// slurm (the agent reaches the socket through ssh's reverse forward) and
// agent (through potato-server). It serves the run on its agent.sock,
// hands it out once, relays the events, keeps the predictions and the
// result, and carries a cancel in the reply to the agent's next post.
package remote

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Run serves one run to the agent that claims it.
type Run struct {
	Run backend.Run
	// Spec is the spec handed out with the claim.
	Spec   trainer.Spec
	Bundle agentproto.BundleInfo
	// HeartbeatTimeoutS goes to the agent with the claim.
	HeartbeatTimeoutS int
	// Where names the agent's side in the run log: "the agent on WHERE".
	Where string
	// Accept, when set, may refuse a claim (a claim for another backend).
	Accept func(agentproto.ClaimRequest) bool
	// Hold makes a claim for a run already handed out wait for its long
	// poll to end rather than answer at once: the agent at the end of an
	// ssh session asks only once, and must not spin on 204s.
	Hold bool
	// OnClaim, when set, is called once the run is handed out.
	OnClaim func(agentproto.ClaimRequest)
	// AuthorizeClaim, when set, accepts tokens besides the run's own for
	// the claim alone (the agent backend's token): every route after the
	// claim wants the run's token, which only the claiming agent has.
	AuthorizeClaim func(token string) bool

	token    string
	tokenSum [32]byte
	listener net.Listener
	server   *http.Server

	mu        sync.Mutex
	claimed   bool
	lastHeard time.Time
	result    *agentproto.Result
	done      chan struct{}
	cancelAt  time.Time
	grace     time.Duration
}

// Serve makes the run's token (token, when not empty) and serves the run
// on its socket, recording the socket's path in run.json when it is not
// the run directory's agent.sock.
func (r *Run) Serve(token string) error {
	if token == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		token = hex.EncodeToString(b)
	}
	r.token = token
	r.tokenSum = sha256.Sum256([]byte(token))
	r.done = make(chan struct{})
	l, path, err := agentproto.ListenUnix(r.Run.Dir.Path(rundir.SocketFile))
	if err != nil {
		return err
	}
	r.listener = l
	if path != r.Run.Dir.Path(rundir.SocketFile) {
		_ = r.Run.Dir.Update(func(rec *rundir.Record) { rec.AgentSocket = path })
	}
	h := agentproto.NewHandler(r, agentproto.HandlerOptions{Authorize: r.authorize, AuthorizeClaim: r.AuthorizeClaim,
		MaxPredictionsMB: r.Run.Config.Training.MaxPredictionsMB})
	r.server = agentproto.Serve(l, h)
	r.Heard()
	return nil
}

// Token is the run's token: for the agent's standard input (ssh).
func (r *Run) Token() string { return r.token }

// Path is the socket's path.
func (r *Run) Path() string {
	if p := r.Run.Dir.Record().AgentSocket; p != "" {
		return p
	}
	return r.Run.Dir.Path(rundir.SocketFile)
}

func (r *Run) authorize(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], r.tokenSum[:]) == 1
}

// Close stops serving.
func (r *Run) Close() {
	if r.server != nil {
		_ = r.server.Close()
	}
	if r.listener != nil {
		r.listener.Close()
	}
}

// Heard records word from the agent now.
func (r *Run) Heard() {
	r.mu.Lock()
	r.lastHeard = time.Now()
	r.mu.Unlock()
}

// Silence is how long the agent has said nothing.
func (r *Run) Silence() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.lastHeard)
}

// Claimed reports whether an agent has the run.
func (r *Run) Claimed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.claimed
}

// Done is closed when the agent's result is in.
func (r *Run) Done() <-chan struct{} { return r.done }

// Reported is the agent's result, nil before it came.
func (r *Run) Reported() *agentproto.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result
}

// Cancel asks for a cancel, answered in the reply to the agent's next
// post; the first call's grace holds.
func (r *Run) Cancel(grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelAt.IsZero() {
		r.grace = grace
		r.cancelAt = time.Now().Add(grace)
	}
}

// CancelAt is when a cancel's grace ends; zero without a cancel.
func (r *Run) CancelAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelAt
}

// Outcome is how the agent's result says the training process ended:
// SIGKILL is the killed outcome (out of memory) of every backend.
func Outcome(res *agentproto.Result) backend.Outcome {
	return backend.Outcome{ExitCode: res.ExitCode, Killed: res.Killed(), Signal: res.KilledBy()}
}

// The agentproto.Run half.

// Claim hands the run out once; a later claim gets no run (at once, or
// at the end of its long poll with Hold).
func (r *Run) Claim(ctx context.Context, req agentproto.ClaimRequest) (*agentproto.Claim, error) {
	if r.Accept != nil && !r.Accept(req) {
		return nil, nil
	}
	r.mu.Lock()
	if r.claimed {
		r.mu.Unlock()
		if r.Hold {
			<-ctx.Done()
		}
		return nil, nil
	}
	r.claimed = true
	r.lastHeard = time.Now()
	r.mu.Unlock()
	if r.OnClaim != nil {
		r.OnClaim(req)
	}
	cfg := r.Run.Config.Training
	return &agentproto.Claim{RunID: r.Run.Dir.ID, RunToken: r.token, Spec: r.Spec, GraceSeconds: cfg.GraceSeconds,
		HeartbeatTimeoutS: r.HeartbeatTimeoutS, MaxPredictionsMB: cfg.MaxPredictionsMB, Bundle: r.Bundle}, nil
}

// checkID refuses a route for another run, or before the claim.
func (r *Run) checkID(id string) error {
	if id != r.Run.Dir.ID {
		return &agentproto.StatusError{Code: http.StatusNotFound, Msg: "no such run"}
	}
	if !r.Claimed() {
		return &agentproto.StatusError{Code: http.StatusConflict, Msg: "the run is not claimed"}
	}
	return nil
}

// BundlePath is the packed bundle.
func (r *Run) BundlePath(id string) (string, error) {
	if err := r.checkID(id); err != nil {
		return "", err
	}
	r.Heard()
	return r.Run.Dir.Path(rundir.BundleArchive), nil
}

// Events relays the agent's events and answers with the cancel flag.
func (r *Run) Events(id string, evs []events.Event, bad []string) (agentproto.Reply, error) {
	if err := r.checkID(id); err != nil {
		return agentproto.Reply{}, err
	}
	r.mu.Lock()
	r.lastHeard = time.Now()
	cancel, grace := !r.cancelAt.IsZero(), r.grace
	r.mu.Unlock()
	for _, e := range evs {
		r.Run.Sink.Event(e)
	}
	for _, l := range bad {
		r.Run.Sink.TrainerLine(l)
	}
	if cancel {
		return agentproto.Reply{Cancel: true, GraceSeconds: int(grace / time.Second)}, nil
	}
	return agentproto.Reply{}, nil
}

// Predictions stores the uploaded predictions.jsonl, by rename once whole.
func (r *Run) Predictions(id string, body io.Reader) error {
	if err := r.checkID(id); err != nil {
		return err
	}
	if err := agentproto.StoreFile(r.Run.Dir.Path(rundir.PredictionsFile), body); err != nil {
		return err
	}
	r.Heard()
	return nil
}

// Result records the agent's report: the run's end on the far side.
func (r *Run) Result(id string, res agentproto.Result) error {
	if err := r.checkID(id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result != nil {
		return &agentproto.StatusError{Code: http.StatusConflict, Msg: "the result is in already"}
	}
	r.result = &res
	r.lastHeard = time.Now()
	if res.Error != "" {
		r.Run.Sink.Logf("the agent on %s reports: exit %d: %s", r.Where, res.ExitCode, res.Error)
	}
	close(r.done)
	return nil
}
