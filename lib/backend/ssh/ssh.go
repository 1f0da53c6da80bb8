// Package ssh is the backend of a GPU server reached with an ssh key (SPEC
// section 5): one ControlMaster connection per run carries the probe, the
// copy of the toolkit's agent, the agent's session with its reverse
// forward of the run's socket, and the copy of the model back.
package ssh

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	"potato-training/lib/backend/remote"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/probe"
	"potato-training/lib/rundir"
	"potato-training/lib/shell"
	"potato-training/lib/sshx"
	"potato-training/lib/trainer"
)

// Step lines and messages of an ssh run (SPEC A4, S7, S8, F6, F7).
const (
	stepConnect  = "connecting to %s"
	stepCopyCode = "copying Potato's code to %s"
	stepWait     = "waiting for the agent on %s"
	stepFetch    = "copying the model from %s"
	msgNoWord    = "No word from the agent on %s for %d seconds"
	msgSession   = "the ssh session to %s ended before the agent reported a result (%s); agent.log holds the agent's last output"
)

// Flavor adapts an ssh run to a backend that starts the same agent over
// the same connection but runs the training process another way: the
// SLURM backend (lib/backend/slurm), whose agent submits it with sbatch.
type Flavor interface {
	// Host replaces the GPU choice and the venv: it judges the host's
	// facts and sets the run's device.
	// It returns the run's device, logging through logf.
	Host(logf func(format string, args ...any), f probe.Facts) (device string, err error)
	// Python is the interpreter the agent hands Python trainers.
	Python() string
	// AgentArgs are more arguments of the agent, shell words; it may put
	// files into the job directory (a shell word) first.
	AgentArgs(ctx context.Context, conn *sshx.Conn, jobDir string) ([]string, error)
	// ResultError is the run's failure when the agent's result is one
	// of the flavor's own (a job the scheduler ended), else nil.
	ResultError(res agentproto.Result) error
}

// Backend runs runs on one ssh host.
type Backend struct {
	b      *config.Backend
	flavor Flavor
}

// New returns the backend of b.
func New(b *config.Backend) *Backend {
	return &Backend{b: b}
}

// NewFlavored returns the backend of b adapted by f.
func NewFlavored(b *config.Backend, f Flavor) *Backend {
	return &Backend{b: b, flavor: f}
}

// execution is one run on the host.
type execution struct {
	b      *config.Backend
	flavor Flavor
	run    backend.Run
	spec   trainer.Spec
	conn   *sshx.Conn

	facts   probe.Facts
	python  string // the interpreter the agent gets: the venv's, with packages
	codeDir string // remote, a shell word
	jobDir  string // remote, a shell word
	jobPath string // the same directory as a path, for sshx
	sock    string // the forwarded socket on the host
	// localAgent is this machine's architecture's agent and its digest,
	// found while the connection is made; code and venv are the answers
	// of the probe's tail (probeTail) for it and the venv.
	localAgent chan agentFile
	code, venv reuse
	// keepJob is set once Collect decides the job directory stays on the
	// host (keep_remote, a file over the limit, a stalled copy); else
	// Close removes it, whatever the run's end.
	keepJob bool
	// stalled is set when the copy back sent nothing for the stall
	// timeout: the link may be gone, so Close waits less for its cleanup.
	stalled bool

	// agent is the protocol's server half for this run.
	agent    remote.Run
	session  *exec.Cmd
	stdin    io.WriteCloser
	sessDone chan error
	agentLog *os.File
}

// remoteWord turns a remote path into a shell word: a leading ~/ becomes
// "$HOME"/ so the remote shell expands it, and a relative path is taken
// from the home directory, as scp and rsync take one, whatever directory
// the remote command has changed to.
func remoteWord(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return `"$HOME"/` + shell.Quote(rest)
	}
	if p == "~" {
		return `"$HOME"`
	}
	if !strings.HasPrefix(p, "/") {
		return `"$HOME"/` + shell.Quote(p)
	}
	return shell.Quote(p)
}

// envPrefix exports the backend's env before a remote command. It holds
// the env's values, secrets among them (HF_TOKEN), so it only ever goes
// into a script on a session's standard input, never into a command line,
// which every user of both hosts may read (ps).
func envPrefix(b *config.Backend) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(b.Env)) {
		fmt.Fprintf(&sb, "export %s=%s; ", k, shell.Quote(b.Env[k]))
	}
	return sb.String()
}

// Prepare connects, reads the host's facts, chooses the GPU (SPEC S4),
// packs the bundle and copies the agent when the host lacks this version.
func (b *Backend) Prepare(ctx context.Context, run backend.Run) (_ backend.Execution, err error) {
	s := &execution{b: b.b, flavor: b.flavor, run: run, spec: run.Spec, sessDone: make(chan error, 1),
		localAgent: make(chan agentFile, 1)}
	// The agent's digest is taken while ssh logs in, so the probe can ask
	// whether the host has that version.
	go func() { s.localAgent <- findAgent(runtime.GOARCH) }()
	host := s.b.Host
	run.Sink.Step(fmt.Sprintf(stepConnect, host))
	// sshx makes the control socket's private directory and removes it.
	conn, err := sshx.Dial(ctx, sshx.TargetOf(s.b), "")
	if err != nil {
		return nil, err
	}
	s.conn = conn
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	facts, err := s.probe(ctx)
	if err != nil {
		return nil, err
	}
	s.facts = facts
	if s.flavor != nil {
		dev, err := s.flavor.Host(run.Sink.Logf, facts)
		if err != nil {
			return nil, err
		}
		s.spec.Limits.Device = dev
		if !trainer.UsesGPU(s.spec.Trainer) {
			s.spec.Limits.Device = "cpu"
			run.Sink.Logf("%s uses no GPU: it trains on the job's CPUs", s.spec.Trainer)
		}
	} else if err := s.chooseDevice(); err != nil {
		return nil, err
	}
	if s.b.NumThreads > 0 {
		s.spec.Limits.NumThreads = s.b.NumThreads
	}
	sum, n, err := bundle.PackFile(run.Dir.Path(rundir.BundleDir), run.Dir.Path(rundir.BundleArchive))
	if err != nil {
		return nil, fmt.Errorf("packing the bundle: %w", err)
	}
	s.agent = remote.Run{Run: run, Spec: s.spec, Bundle: agentproto.BundleInfo{Bytes: n, SHA256: sum},
		HeartbeatTimeoutS: s.b.HeartbeatTimeoutS, Where: s.b.Host, Hold: true,
		OnClaim: func(req agentproto.ClaimRequest) {
			run.Sink.Logf("the agent on %s (%s) claimed the run", s.b.Host, req.Host)
		}}
	if err := s.copyCode(ctx); err != nil {
		return nil, err
	}
	if s.flavor != nil {
		s.python = s.flavor.Python()
		return s, nil
	}
	if err := s.makeVenv(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *execution) Spec() trainer.Spec { return s.spec }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Start serves the run on its socket, forwards a socket in the remote /tmp
// to it, and starts the agent there with the token and the backend's env
// on standard input only (SPEC S6, S9): the command line of ssh, and of
// the remote shell, holds no secret.
func (s *execution) Start(ctx context.Context) (backend.Started, error) {
	if err := s.agent.Serve(testToken()); err != nil {
		return backend.Started{}, err
	}
	path := s.agent.Path()

	log, err := os.OpenFile(s.run.Dir.Path(rundir.AgentLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return backend.Started{}, err
	}
	s.agentLog = log
	remoteSock := fmt.Sprintf("/tmp/potato-%s-%s.sock", s.run.Dir.ID, randHex(4))
	s.sock = remoteSock
	cmd := "umask 077 && mkdir -p " + s.jobDir + " && cd " + s.jobDir + " && exec " + s.codeDir + "/potato-agent" +
		" --socket " + shell.Quote(remoteSock) + " --env-stdin --once --backend " + shell.Quote(s.b.Name) +
		" --workdir " + remoteWord(s.b.RemoteDir) + " --python " + shell.Quote(s.python)
	if s.flavor != nil {
		more, err := s.flavor.AgentArgs(ctx, s.conn, s.jobDir)
		if err != nil {
			return backend.Started{}, err
		}
		cmd += " " + strings.Join(more, " ")
	}
	sess := s.conn.Command(ctx, cmd, "-R", remoteSock+":"+path, "-o", "StreamLocalBindUnlink=yes")
	sess.Stdout, sess.Stderr = log, log
	stdin, err := sess.StdinPipe()
	if err != nil {
		return backend.Started{}, err
	}
	if err := sess.Start(); err != nil {
		return backend.Started{}, fmt.Errorf("starting the agent on %s: %w", s.b.Host, err)
	}
	s.session, s.stdin = sess, stdin
	s.agent.Heard()
	go func() { s.sessDone <- sess.Wait() }()
	env, err := json.Marshal(s.b.Env)
	if err != nil {
		return backend.Started{}, err
	}
	if s.b.Env == nil {
		env = []byte("{}")
	}
	if _, err := io.WriteString(stdin, s.agent.Token()+"\n"+string(env)+"\n"); err != nil {
		return backend.Started{}, fmt.Errorf("handing the token to the agent on %s: %w", s.b.Host, err)
	}
	s.run.Sink.Logf("started the agent on %s", s.b.Host)
	return backend.Started{Step: fmt.Sprintf(stepWait, s.b.Host)}, nil
}

// Relay follows the run until the agent reports its result, the session
// ends, the agent falls silent (SPEC S11), or a cancel's grace has passed
// (S10). The events come through the socket as the agent posts them.
func (s *execution) Relay(ctx context.Context) (backend.Outcome, error) {
	timeout := time.Duration(s.b.HeartbeatTimeoutS) * time.Second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.agent.Done():
			return s.outcome()
		case err := <-s.sessDone:
			s.sessDone <- err
			// A result may be on its way through the socket still.
			select {
			case <-s.agent.Done():
				return s.outcome()
			case <-time.After(2 * time.Second):
			}
			if !s.agent.CancelAt().IsZero() {
				return backend.Outcome{ExitCode: -1, Signal: "cancelled"}, nil
			}
			why := "exit status 0"
			if err != nil {
				why = err.Error()
			}
			return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgSession, s.b.Host, why)
		case <-tick.C:
			silent, cancelAt := s.agent.Silence(), s.agent.CancelAt()
			if !cancelAt.IsZero() && time.Now().After(cancelAt) {
				s.closeSession()
				return backend.Outcome{ExitCode: -1, Signal: "cancelled"}, nil
			}
			if timeout > 0 && silent > timeout {
				s.closeSession()
				return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgNoWord, s.b.Name, s.b.HeartbeatTimeoutS)
			}
		case <-ctx.Done():
			s.closeSession()
			return backend.Outcome{ExitCode: -1}, ctx.Err()
		}
	}
}

// outcome is the run's end as the agent's result tells it; an agent that
// stopped because its session ended makes the run fail with that reason.
func (s *execution) outcome() (backend.Outcome, error) {
	res := s.agent.Reported()
	if res.Code == agentproto.CodeLostSession {
		return backend.Outcome{ExitCode: -1}, fmt.Errorf(msgSession, s.b.Host, res.Error)
	}
	if s.flavor != nil {
		if err := s.flavor.ResultError(*res); err != nil {
			return backend.Outcome{ExitCode: -1}, err
		}
	}
	return remote.Outcome(res), nil
}

// Cancel is answered in the reply to the agent's next post; the run ends
// cancelled once grace has passed, whatever the agent does.
func (s *execution) Cancel(ctx context.Context, grace time.Duration) error {
	s.agent.Cancel(grace)
	return nil
}

func (s *execution) closeSession() {
	if s.stdin != nil {
		s.stdin.Close()
	}
	if s.session != nil && s.session.Process != nil {
		select {
		case err := <-s.sessDone:
			s.sessDone <- err
		case <-time.After(3 * time.Second):
			_ = s.session.Process.Kill()
		}
	}
}

// Close releases the connection, the socket and the log.
func (s *execution) Close() error {
	s.closeSession()
	if s.conn != nil {
		// The job directory (unless Collect kept it) and the forwarded
		// socket go, whatever the run's end.
		wait := 30 * time.Second
		if s.stalled {
			wait = 5 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		cmd := ""
		if s.jobDir != "" && !s.keepJob && !s.b.KeepRemote {
			cmd = "rm -rf " + s.jobDir + "; "
		}
		if s.sock != "" {
			cmd += "rm -f " + shell.Quote(s.sock)
		}
		if cmd != "" {
			if _, _, err := s.conn.Run(ctx, cmd, nil); err != nil {
				s.run.Sink.Logf("warning: cleaning up on %s: %v", s.b.Host, err)
			}
		}
		cancel()
	}
	s.agent.Close()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	if s.agentLog != nil {
		s.agentLog.Close()
	}
	return nil
}
