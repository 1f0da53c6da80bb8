// Package agent is the far side of a remote run, as potato-agent(1)
// describes it: it claims a job over agent protocol v1, downloads and
// unpacks the bundle, runs the training process with the same runner as
// the local backend, relays its events, uploads the predictions and
// reports the result.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/bundle"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/slurm"
	"potato-training/lib/trainer"
)

// Options configure an agent.
type Options struct {
	Client  *agentproto.Client
	Backend string
	Workdir string // jobs go to Workdir/jobs/<run>
	Python  string
	Once    bool
	Keep    bool // keep each job's bundle
	// Worker is the potato-agent executable that runs built-in trainers.
	Worker string
	// Heartbeat is the longest time between two posts (at most 10 s).
	Heartbeat time.Duration
	// Lost is closed when the connection to the server is known to be gone
	// (the ssh session's standard input reached EOF): the job is stopped.
	Lost <-chan struct{}
	// Log takes the agent's own lines. It may be a stream that is gone
	// or no longer read (an ssh session's standard error after the link
	// dropped): its errors are ignored, and potato-agent hands it a writer
	// that never blocks.
	Log io.Writer
	// Name, when set, starts each line of Log and the agent's own lines in
	// the run log ("potato-agent: ..."): the program's name, which only
	// the command knows.
	Name string
	// MaxBundleBytes bounds an unpacked bundle.
	MaxBundleBytes int64
	// AllowExec lets a job name a program of this machine as its trainer
	// (exec:PATH). Only an agent started over ssh by the dispatch of the
	// machine's own user allows any; a polling agent runs only the
	// programs of ExecAllowed.
	AllowExec bool
	// ExecAllowed are the programs, absolute paths, that a job may name as
	// its trainer on a polling agent (--allow-exec): its operator's
	// choice, never the server's.
	ExecAllowed []string
	// SLURM, when set, makes this an agent on a login node: each job's
	// training process is submitted with sbatch (SPEC M5, M9).
	SLURM *slurm.Options
	// Unreachable is how long the server may fail every request during a
	// job, from the bundle's download to the result, before the agent
	// stops the job itself (SPEC G9; default 300 s).
	Unreachable time.Duration
	// Env is the backend's env that came on standard input
	// (Settings.EnvStdin), already in the agent's own environment; a
	// SLURM job gets it from a file of mode 0600 (trainSLURM).
	Env map[string]string
	// Polling marks an agent that polls a server (--server, SPEC G): it
	// keeps trying while the server is away, spools what a job owes the
	// server under Workdir/spool until the server has it, caches bundles by
	// digest, and names its artifacts HOST:DIR. An agent started over ssh
	// makes one attempt at each request and names them ssh://HOST/DIR.
	Polling bool
}

// DefaultUnreachable is G9's limit.
const DefaultUnreachable = 300 * time.Second

// MsgUnreachable is why an agent stopped a job whose server it could not
// reach.
const MsgUnreachable = "the server could not be reached for %d seconds"

// LostSession is how the agent's result says it stopped its job because
// its ssh session (standard input) ended.
const LostSession = "the agent's ssh session ended"

// DefaultGrace is the SIGTERM-to-SIGKILL time of a job that carries none.
const DefaultGrace = 20 * time.Second

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, o.named(format)+"\n", args...)
	}
}

// named is s after the program's name, when the options have one.
func (o *Options) named(s string) string {
	if o.Name == "" {
		return s
	}
	return o.Name + ": " + s
}

// failure is how a job ended that its result reports with a code: the
// code (agentproto.Code*), the signal that killed the training process
// if one did, and the words of the result's error.
type failure struct {
	code   string
	signal int
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// fail is err reported with code.
func fail(code string, err error) error { return &failure{code: code, err: err} }

// failf is fail with a formatted error.
func failf(code, format string, args ...any) error {
	return &failure{code: code, err: fmt.Errorf(format, args...)}
}

// result is the Result of a job that ended with code and err; an error
// that carries no code is agentproto.CodeFailed.
func result(code int, uri string, err error) agentproto.Result {
	res := agentproto.Result{ExitCode: code, ArtifactURI: uri}
	if err == nil {
		return res
	}
	res.Error, res.Code = err.Error(), agentproto.CodeFailed
	var f *failure
	if errors.As(err, &f) {
		res.Code, res.Signal = f.code, f.signal
	}
	return res
}

// state is what an agent keeps across its jobs.
type state struct {
	o    Options
	host string
	out  outage
	// lastOK is when a request last reached the server.
	mu        sync.Mutex
	lastOK    time.Time
	spoolSeen map[string]bool
	// lastAnswer is the last refusal logged for a spooled run.
	lastAnswer map[string]string
	// exit is the exit code the last job ended with (finish).
	exit int
}

// heard records an answer from the server.
func (s *state) heard() {
	s.mu.Lock()
	s.lastOK = time.Now()
	s.mu.Unlock()
	s.out.ok()
}

func (s *state) silence() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastOK)
}

// Run claims and runs jobs until ctx ends (or after one with Once). A
// polling agent first sends what its spool holds, and goes on trying
// while the server cannot be reached; a claim refused with 401 ends it.
func Run(ctx context.Context, o Options) error {
	if o.Heartbeat <= 0 || o.Heartbeat > 10*time.Second {
		o.Heartbeat = 10 * time.Second
	}
	if o.MaxBundleBytes <= 0 {
		o.MaxBundleBytes = 64 << 30
	}
	if o.Unreachable <= 0 {
		o.Unreachable = DefaultUnreachable
	}
	if err := absOptions(&o); err != nil {
		return err
	}
	host, _ := os.Hostname()
	s := &state{o: o, host: host, lastOK: time.Now(), spoolSeen: map[string]bool{}, lastAnswer: map[string]string{}}
	s.out.o = &s.o
	if o.Polling {
		pruneCache(o.Workdir, CacheAge)
	}
	if o.Polling {
		o.logf("polling for jobs of backend %s on %s, in %s", o.Backend, host, o.Workdir)
	}
	var bo backoff
	for {
		if o.Polling {
			s.resendSpool(ctx)
		}
		cctx, cancel := context.WithTimeout(ctx, claimTimeout)
		claim, err := o.Client.Claim(cctx, agentproto.ClaimRequest{Backend: o.Backend, Host: host, Workdir: o.Workdir, Version: "1"})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !o.Polling {
				return fmt.Errorf("claim: %w", err)
			}
			if httpCode(err) == http.StatusUnauthorized {
				return fmt.Errorf(MsgTokenRefused, o.Backend, o.Backend)
			}
			s.out.fail("claiming a job", err)
			if !sleep(ctx, bo.next()) {
				return ctx.Err()
			}
			continue
		}
		bo.reset()
		s.heard()
		if claim == nil {
			if o.Once && ctx.Err() != nil {
				return nil
			}
			continue
		}
		if !rundir.ValidID(claim.RunID) {
			return fmt.Errorf("the server handed out a run id %q that is not one", claim.RunID)
		}
		if trainer.IsExec(claim.Spec.Trainer) && !o.execAllowed(claim.Spec.Trainer) {
			o.logf("run %s: refusing trainer %s: this agent runs only the toolkit's trainers and those of --allow-exec", claim.RunID, claim.Spec.Trainer)
			err := s.finish(ctx, &job{o: o, a: s, claim: claim}, events.ExitBadSpec, "", "",
				fail(agentproto.CodeExecRefused, errors.New("this agent runs only the toolkit's trainers and the programs its --allow-exec names, not "+claim.Spec.Trainer)))
			if o.Once {
				return &JobError{RunID: claim.RunID, Err: err}
			}
			continue
		}
		o.logf("run %s: started: trainer %s, schemas %s", claim.RunID, claim.Spec.Trainer, schemaNames(claim.Spec))
		s.exit = -1
		if err := runJob(ctx, s, claim); err != nil {
			if o.Once {
				// The caller says why, once.
				o.logf("run %s: %s", claim.RunID, jobOutcome(s.exit, nil))
				return &JobError{RunID: claim.RunID, Err: err, Cancelled: errors.Is(err, ErrCancelled)}
			}
			o.logf("run %s: %s", claim.RunID, jobOutcome(s.exit, err))
		} else {
			o.logf("run %s: %s", claim.RunID, jobOutcome(s.exit, nil))
		}
		if o.Once {
			return nil
		}
	}
}

// ErrCancelled is the end of a job whose training process the server's
// cancel stopped.
var ErrCancelled = errors.New("cancelled by the server")

// JobError is the job of an agent started with Once that did not end
// well: its training process failed or was stopped, or its bundle, its
// predictions or its result did not get through. It has no Unwrap on
// purpose: a job that a signal stopped is still a failed job, not the
// context.Canceled of an agent stopped between jobs.
type JobError struct {
	RunID string
	Err   error
	// Cancelled is a job the server cancelled (ErrCancelled).
	Cancelled bool
}

func (e *JobError) Error() string { return fmt.Sprintf("run %s: %v", e.RunID, e.Err) }

// absOptions makes the paths of o absolute (see paths.go).
func absOptions(o *Options) error {
	var err error
	if o.Workdir, err = AbsPath(o.Workdir); err != nil {
		return fmt.Errorf("the work directory %s: %w", o.Workdir, err)
	}
	if o.Python, err = ProgramPath(o.Python); err != nil {
		return fmt.Errorf("the interpreter %s: %w", o.Python, err)
	}
	if o.Worker, err = ProgramPath(o.Worker); err != nil {
		return fmt.Errorf("the worker %s: %w", o.Worker, err)
	}
	if o.SLURM != nil {
		so := *o.SLURM
		if so.JobPython, err = ProgramPath(so.JobPython); err != nil {
			return fmt.Errorf("job_python %s: %w", so.JobPython, err)
		}
		o.SLURM = &so
	}
	return nil
}

// jobOutcome is the end of a job's log line: its exit code and the
// error, if any, that ended it.
func jobOutcome(code int, err error) string {
	var s string
	switch code {
	case events.ExitFinished:
		s = "success"
		if err != nil {
			s = "trained, but"
		}
	case events.ExitCancelled:
		s = "cancelled"
	case -1:
		s = "failed"
	default:
		s = fmt.Sprintf("failed (exit status %d)", code)
	}
	if err != nil {
		s += ": " + err.Error()
	}
	return "finished: " + s
}

func schemaNames(spec trainer.Spec) string {
	var names []string
	for _, sc := range spec.Schemas {
		names = append(names, sc.Name)
	}
	return strings.Join(names, ",")
}

// job is one claimed run on this machine.
type job struct {
	o      Options
	a      *state
	claim  *agentproto.Claim
	dir    string
	mu     sync.Mutex
	queue  []events.Event
	raw    [][]byte
	cancel bool
	grace  time.Duration
	proc   *trainer.Process
	sj     *slurmJob // the submitted job, in SLURM mode
	// predictions is the result event's predictions_file.
	predictions string
	postMu      sync.Mutex
	// why the job was stopped, once it was, and the result's code for it.
	why, whyCode string
	// selfStop is why the agent stopped the job on its own (G9).
	selfStop string
	// abort ends ctx, the job's requests, once the agent has given up on
	// the server.
	abort     context.CancelFunc
	ctx       context.Context
	stopPosts func()
	// queued is told of each event emit queues, so the poster sends it
	// without waiting for its tick.
	queued chan struct{}
	// fetched: the job's bundle is in the cache.
	fetched bool
	// errMsg is the message of the training process's last error event.
	errMsg string
}

func runJob(ctx context.Context, s *state, claim *agentproto.Claim) error {
	o, host := s.o, s.host
	dir := filepath.Join(o.Workdir, "jobs", claim.RunID)
	// jctx ends the job's requests once the agent gives up on the server
	// (G9); the result is then kept in the spool.
	jctx, abort := context.WithCancel(ctx)
	defer abort()
	j := &job{o: o, a: s, claim: claim, dir: dir, grace: time.Duration(claim.GraceSeconds) * time.Second, abort: abort,
		queued: make(chan struct{}, 1)}
	if o.Polling && claim.RunToken != "" {
		// The run's own token: the run goes on if the backend's token is
		// replaced (registered again) meanwhile.
		if c, err := o.Client.WithToken(claim.RunToken); err == nil {
			j.o.Client = c
		}
	}
	s.heard()
	defer j.watch(jctx)()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s.finish(ctx, j, -1, "", "", fail(agentproto.CodeFailed, err))
	}
	if j.grace <= 0 {
		j.grace = DefaultGrace
	}
	// A cancel arrives in the reply to a post: post at least twice per
	// grace period, so a short grace_seconds still reaches the trainer.
	if hb := j.grace / 2; hb < j.o.Heartbeat {
		j.o.Heartbeat = max(hb, 500*time.Millisecond)
	}
	j.emit(events.Status("downloading", "downloading the bundle"))
	bdir := filepath.Join(dir, "bundle")
	j.startPosting(jctx)
	archive, err := j.bundle(jctx)
	if err == nil {
		os.RemoveAll(bdir)
		err = bundle.UnpackFile(archive, bdir, o.MaxBundleBytes, claim.Bundle.SHA256)
	}
	if err != nil {
		if why := j.stoppedBy(); why != "" {
			return s.finish(ctx, j, -1, "", "", failf(agentproto.CodeUnreachable, "%s: it gave up the job while downloading the bundle", why))
		}
		return s.finish(ctx, j, events.ExitBadSpec, "", "", failf(agentproto.CodeBundleFailed, "the bundle: %w", err))
	}
	if !o.Polling {
		os.Remove(archive)
	}
	spec := claim.Spec
	spec.BundleDir = bdir
	spec.Workdir = filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(spec.Workdir, 0o700); err != nil {
		return s.finish(ctx, j, -1, "", "", fail(agentproto.CodeFailed, err))
	}
	env := deviceEnv(&spec)
	specPath := filepath.Join(dir, "spec.json")
	if err := writeSpec(spec, specPath); err != nil {
		return s.finish(ctx, j, -1, "", "", fail(agentproto.CodeFailed, err))
	}
	var code int
	var trainErr error
	if o.SLURM != nil {
		code, trainErr = j.trainSLURM(ctx, spec, specPath)
	} else {
		code, trainErr = j.train(ctx, spec, specPath, env)
	}
	// The trainer's last events go first; the posts go on during the
	// upload, so a large predictions file does not look like a silent agent.
	j.post(jctx)
	j.mu.Lock()
	pred := trainer.PredictionsPath(spec.Workdir, j.predictions)
	j.mu.Unlock()
	if _, err := os.Stat(pred); err != nil {
		pred = ""
	}
	if !o.Keep {
		os.RemoveAll(bdir)
	}
	return s.finish(ctx, j, code, artifactURI(o.Polling, host, spec.Workdir), pred, trainErr)
}

// bundle returns the job's bundle.tar.gz: for a polling agent from the
// cache by digest, else downloaded into the job's directory.
func (j *job) bundle(ctx context.Context) (string, error) {
	if j.o.Polling {
		return j.fetchBundle(ctx)
	}
	archive := filepath.Join(j.dir, "bundle.tar.gz")
	err := j.o.Client.DownloadBundle(ctx, j.claim.RunID, archive, j.claim.Bundle, func(done, total int64) { j.a.heard() })
	return archive, err
}

// artifactURI names the job's artifacts/ (SPEC G8): HOST:DIR for a
// polling agent, ssh://HOST/DIR for one started over ssh, whose dispatch
// copies the model back from there.
func artifactURI(polling bool, host, dir string) string {
	if polling {
		return host + ":" + dir
	}
	return "ssh://" + host + dir
}

// stoppedBy is why the agent gave up the job on its own, or "".
func (j *job) stoppedBy() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.selfStop
}

// watch is G9: once the server has not answered for Unreachable, the
// agent stops the training process and ends the job's requests. It
// returns the function that ends the watch.
func (j *job) watch(ctx context.Context) func() {
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if j.a.silence() > j.o.Unreachable {
					why := fmt.Sprintf(MsgUnreachable, int(j.o.Unreachable/time.Second))
					j.mu.Lock()
					if j.selfStop == "" {
						j.selfStop = why
					}
					j.mu.Unlock()
					j.stop(agentproto.CodeUnreachable, why, j.grace)
					j.abort()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// finish sends the job's predictions (pred, "" for none) and its result,
// and stops the posts. A polling agent spools them first and tries until
// the server acknowledges them or has been silent for Unreachable; they
// then stay in the spool, for Run to send later. An agent started over
// ssh makes one attempt.
func (s *state) finish(ctx context.Context, j *job, code int, uri, pred string, jobErr error) error {
	s.exit = code
	res := result(code, uri, jobErr)
	// An agent stopped by a signal still sends what its job owes, with one
	// bounded attempt.
	stopping := ctx.Err() != nil
	if stopping {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
		defer cancel()
	}
	if !s.o.Polling {
		if stopping && j.pending() > 0 {
			// The posts ended with the agent's context; the training
			// process's last events go before the result.
			j.post(ctx)
		}
		if pred != "" {
			if err := s.o.Client.UploadPredictions(ctx, j.claim.RunID, pred); err != nil {
				j.stopPosting()
				rcode := agentproto.CodeUploadFailed
				if errors.Is(err, agentproto.ErrTooLarge) {
					rcode = agentproto.CodeUploadRefused
				}
				return report(ctx, s.o, j.claim, code, uri, failf(rcode, "uploading the predictions: %w", err))
			}
		}
		j.stopPosting()
		if err := report(ctx, s.o, j.claim, code, uri, jobErr); err != nil {
			return err
		}
		return j.exitFailure(code)
	}
	it := &item{RunID: j.claim.RunID, Backend: s.o.Backend, RunToken: j.claim.RunToken,
		MaxPredictionsMB: j.claim.MaxPredictionsMB, Result: res}
	if j.fetched {
		it.BundleSHA256 = j.claim.Bundle.SHA256
	}
	if err := newItem(s.o.Workdir, it, pred); err != nil {
		s.o.logf("run %s: cannot spool its result (%v): sending it without a copy on disk", j.claim.RunID, err)
		it.dir = ""
	}
	// The watch (G9) ends jctx.
	jctx := j.ctxOr(ctx)
	if stopping {
		jctx = ctx
	}
	d := s.deliverer(it)
	d.beforeResult = func() bool {
		j.stopPosting()
		return j.pending() == 0
	}
	var bo backoff
	for {
		if j.pending() > 0 {
			j.post(jctx)
		}
		done, err := false, error(errPending)
		if j.pending() == 0 {
			done, err = d.step(jctx)
		}
		if done {
			switch {
			case it.Result.Error != "":
				return errors.New(it.Result.Error)
			case it.refused != "":
				return errors.New(it.refused)
			}
			return j.exitFailure(code)
		}
		if err != nil && !errors.Is(err, errPending) {
			return fmt.Errorf("spooling the result: %w", err)
		}
		s.pendingFail(j.claim.RunID, "sending the result", err)
		if stopping || jctx.Err() != nil || s.silence() > s.o.Unreachable || !sleep(jctx, bo.next()) {
			break
		}
	}
	j.stopPosting()
	j.mu.Lock()
	evs, raw := j.queue, j.raw
	j.queue, j.raw = nil, nil
	j.mu.Unlock()
	if it.dir == "" {
		return fmt.Errorf("the result could not be sent: %s", res.Error)
	}
	if err := it.addEvents(evs, raw); err != nil {
		s.o.logf("run %s: spooling %d events: %v", j.claim.RunID, len(evs)+len(raw), err)
	}
	s.o.logf("run %s: the server has not answered for %s: the result is kept in %s and sent when it answers again",
		j.claim.RunID, s.silence().Round(time.Second), it.dir)
	return fmt.Errorf("the result is not sent yet (kept in %s)", it.dir)
}

// exitFailure is nil for a training process that exited 0, else why the
// job failed: its exit status and its last error event's message.
func (j *job) exitFailure(code int) error {
	if code == 0 {
		return nil
	}
	j.mu.Lock()
	msg, why := j.errMsg, j.whyCode
	j.mu.Unlock()
	if why == agentproto.CodeCancelled {
		return ErrCancelled
	}
	if msg != "" {
		return fmt.Errorf("the training process failed (exit status %d): %s", code, msg)
	}
	return fmt.Errorf("the training process failed (exit status %d)", code)
}

// ctxOr is the job's context, ended by the watch, or ctx.
func (j *job) ctxOr(ctx context.Context) context.Context {
	if j.ctx != nil {
		return j.ctx
	}
	return ctx
}

func (j *job) pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.queue) + len(j.raw)
}

func report(ctx context.Context, o Options, claim *agentproto.Claim, code int, uri string, err error) error {
	res := result(code, uri, err)
	if perr := o.Client.PostResult(ctx, claim.RunID, res); perr != nil {
		return errors.Join(err, fmt.Errorf("reporting the result: %w", perr))
	}
	return err
}

func (j *job) emit(e events.Event) {
	defer func() {
		select {
		case j.queued <- struct{}{}:
		default:
		}
	}()
	j.mu.Lock()
	j.queue = append(j.queue, e)
	switch e.Kind {
	case events.KindResult:
		j.predictions = e.String("predictions_file")
	case events.KindError:
		j.errMsg = e.String("message")
	}
	j.mu.Unlock()
}

// startPosting sends queued events at least every heartbeat period and
// soon after each event, and applies a cancel from a reply; after a
// failed post it waits as Backoff says. stopPosting flushes what is left
// and stops it. An event is sent at once when the last post is a tick
// (250 ms) old, else on the next tick: the run's first event does not
// wait, and a chatty trainer still makes at most four posts a second.
func (j *job) startPosting(ctx context.Context) {
	j.ctx = ctx
	done := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		// gap is the least time between two posts of events; a little
		// under the tick, which may come a little early.
		const period, gap = 250 * time.Millisecond, 200 * time.Millisecond
		tick := time.NewTicker(period)
		defer tick.Stop()
		last, next := time.Time{}, time.Time{}
		var bo backoff
		send := func() {
			if j.post(ctx) {
				bo.reset()
				next = time.Time{}
			} else {
				next = time.Now().Add(bo.next())
			}
			last = time.Now()
		}
		for {
			select {
			case <-done:
				j.post(ctx)
				return
			case <-ctx.Done():
				return
			case <-j.queued:
				if time.Now().Before(next) || time.Since(last) < gap {
					continue // the next tick sends it
				}
				send()
			case <-tick.C:
				if time.Now().Before(next) {
					continue
				}
				if since := time.Since(last); j.pending() > 0 && since >= gap || since >= j.o.Heartbeat {
					send()
				}
			}
		}
	}()
	var once sync.Once
	j.stopPosts = func() {
		once.Do(func() {
			close(done)
			<-flushed
		})
	}
}

func (j *job) stopPosting() {
	if j.stopPosts != nil {
		j.stopPosts()
	}
}

// post sends what is queued, or a heartbeat; it reports whether the
// server answered.
func (j *job) post(ctx context.Context) bool {
	// One post at a time, so events reach the server in their order.
	j.postMu.Lock()
	defer j.postMu.Unlock()
	j.mu.Lock()
	evs, raw := j.queue, j.raw
	j.queue, j.raw = nil, nil
	j.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, postTimeout)
	reply, err := j.o.Client.PostEvents(pctx, j.claim.RunID, evs, raw)
	cancel()
	if err != nil {
		// Put them back; the next post retries.
		j.mu.Lock()
		j.queue = append(evs, j.queue...)
		j.raw = append(raw, j.raw...)
		j.mu.Unlock()
		j.a.out.fail("run "+j.claim.RunID, err)
		return false
	}
	j.a.heard()
	if reply.Cancel {
		g := j.grace
		if reply.GraceSeconds > 0 {
			g = time.Duration(reply.GraceSeconds) * time.Second
		}
		j.stop(agentproto.CodeCancelled, "cancel requested by the server", g)
	}
	return true
}

// stop sends SIGTERM to the training process's group, SIGKILL after grace,
// or cancels the SLURM job; why says the reason in words, code as the
// result's code. The stop comes before the log line, which is written
// without the job's lock held: the log is the agent's standard error,
// which the very event that stops the job (a dropped ssh session) may
// have closed or stalled.
func (j *job) stop(code, why string, grace time.Duration) {
	j.mu.Lock()
	if j.cancel {
		j.mu.Unlock()
		return
	}
	j.cancel = true
	j.why, j.whyCode = why, code
	proc, sj := j.proc, j.sj
	j.mu.Unlock()
	if proc != nil {
		proc.Terminate(grace)
	}
	if sj != nil {
		go sj.cancel(grace)
	}
	if proc == nil && sj == nil {
		j.o.logf("%s: stopping the job", why)
	} else {
		j.o.logf("%s: stopping the training process (SIGKILL after %s)", why, grace)
	}
}

// execAllowed reports whether the agent may run the program of an
// exec:PROGRAM trainer: any, for an agent of an ssh or slurm backend;
// for a polling agent, only one its --allow-exec names, found by the
// same absolute path (a name is looked up on PATH, as it would run).
func (o *Options) execAllowed(name string) bool {
	if o.AllowExec {
		return true
	}
	prog, err := ProgramPath(strings.TrimPrefix(name, trainer.ExecPrefix))
	if err == nil && !strings.Contains(prog, "/") {
		prog, err = exec.LookPath(prog)
	}
	if err != nil {
		return false
	}
	return slices.Contains(o.ExecAllowed, filepath.Clean(prog))
}

// train runs the training process and relays its events; it returns the
// exit code and, when it did not finish normally, why (a *failure).
func (j *job) train(ctx context.Context, spec trainer.Spec, specPath string, env []string) (int, error) {
	// Built-ins run as the worker, Python trainers with --python (their
	// script written once under the workdir), exec: programs as they are.
	argv, err := trainer.Argv(spec.Trainer, specPath, trainer.Programs{Worker: j.o.Worker, Python: j.o.Python,
		ScriptDir: filepath.Join(j.o.Workdir, "trainers")})
	if err != nil {
		return -1, failf(agentproto.CodeStartFailed, "cannot start the training process: %v", err)
	}
	// An exec: program named by a relative path is found from where the
	// agent was started, not from the job's directory it runs in.
	path, err := ProgramPath(argv[0])
	if err != nil {
		return -1, failf(agentproto.CodeStartFailed, "cannot start the training process: %v", err)
	}
	args := argv[1:]
	stderr, err := os.Create(filepath.Join(j.dir, "stderr.log"))
	if err != nil {
		return -1, fail(agentproto.CodeFailed, err)
	}
	defer stderr.Close()
	p, err := trainer.Start(trainer.Command{Path: path, Args: args, Dir: j.dir, Env: env, Stderr: stderr})
	if err != nil {
		return -1, failf(agentproto.CodeStartFailed, "cannot start the training process: %v", err)
	}
	j.mu.Lock()
	j.proc = p
	cancelled := j.cancel
	j.mu.Unlock()
	if cancelled {
		p.Terminate(j.grace)
	}
	j.emit(events.Log("info", j.o.named(fmt.Sprintf("training process %d started in %s", p.PID(), j.dir))))
	go p.Relay(j.emit, func(line string) {
		j.mu.Lock()
		j.raw = append(j.raw, []byte(line))
		j.mu.Unlock()
	})
	why, code := "", ""
	select {
	case <-p.Done():
	case <-j.o.Lost:
		why, code = LostSession, agentproto.CodeLostSession
		j.stop(code, why, j.grace)
		<-p.Done()
	case <-ctx.Done():
		why, code = "the agent was stopped", agentproto.CodeAgentStopped
		j.stop(code, why, j.grace)
		<-p.Done()
	}
	if why == "" {
		why, code = j.stoppedBy(), agentproto.CodeUnreachable
	}
	ex := p.Exit()
	switch {
	case why != "":
		return -1, &failure{code: code, signal: int(ex.Signal), err: fmt.Errorf("%s: it stopped the training process (%s)", why, ex)}
	case ex.Signal != 0:
		return -1, &failure{code: agentproto.CodeKilledBySignal, signal: int(ex.Signal), err: errors.New(ex.String())}
	}
	return ex.Code, nil
}

// deviceEnv turns the device the dispatch chose ("cuda:1", "cuda:0,1",
// "cpu") into the training process's environment, and the spec's device
// into the one the process sees ("cuda:0" once only GPU 1 is visible).
func deviceEnv(spec *trainer.Spec) []string {
	var extra []string
	dev := spec.Limits.Device
	switch {
	case strings.HasPrefix(dev, "cuda:"):
		ids := strings.TrimPrefix(dev, "cuda:")
		extra = append(extra, "CUDA_VISIBLE_DEVICES="+ids, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
		spec.Limits.Device = "cuda:0"
		if strings.Contains(ids, ",") {
			spec.Limits.Device = "cuda"
		}
	case dev == "cpu" || dev == "":
		extra = append(extra, "CUDA_VISIBLE_DEVICES=")
		spec.Limits.Device = "cpu"
	}
	extra = append(extra, "POTATO_TRAINING_DEVICE="+spec.Limits.Device)
	return withoutToken(trainer.Environ(spec.Limits.NumThreads, extra...))
}

// withoutToken drops the token variable: the training process never sees
// the run's credentials.
func withoutToken(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "POTATO_TRAINING_TOKEN=") {
			out = append(out, kv)
		}
	}
	return out
}
