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
