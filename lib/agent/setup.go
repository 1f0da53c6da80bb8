package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
	"potato-training/lib/slurm"
)

// UsageError is a setting the agent cannot start with (potato-agent(1),
// EXIT STATUS 2): no server, no token, a path or a SLURM config it cannot
// use.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Settings are the agent's settings as its command line gives them.
type Settings struct {
	Server    string // https://HOST:PORT or unix:PATH: a polling agent
	Socket    string // a dispatch's socket: the token is on standard input
	Backend   string
	TokenFile string
	Python    string
	Once      bool
	Workdir   string
	Keep      bool
	// SLURMConfig is a JSON file of the backend's SLURM keys: the agent
	// then submits each job with sbatch (SPEC M5, M9).
	SLURMConfig string
	// AllowExec are the programs a polling agent may run as a job's
	// trainer (exec:PROGRAM), by path.
	AllowExec []string
	// InsecureHTTP lets a polling agent reach a server outside loopback
	// over plain http://, its token in the clear.
	InsecureHTTP bool
	// CAFile is a PEM file of the CAs that an https:// server's
	// certificate is checked against (a private CA).
	CAFile string
	// EnvStdin: with Socket, the line after the token is a JSON object of
	// the backend's env, which the agent exports for itself and its jobs,
	// so that no value of it is ever on a command line.
	EnvStdin bool
	// Name is the program's name for Options.Name.
	Name string
}

// Options turns the settings into the options of Run: every path made
// absolute, once, since jobs run in directories of their own, where a
// relative one would name something else; the token read; the SLURM keys
// read. Started with Socket, the agent reads the run's token from the
// first line of stdin, and stdin reaching EOF afterwards (the ssh session
// gone) closes Options.Lost. A setting it cannot use is a *UsageError.
func (s Settings) Options(stdin io.Reader, log io.Writer) (Options, error) {
	if err := s.absPaths(); err != nil {
		return Options{}, &UsageError{Err: err}
	}
	server, token, env, lost, err := s.credentials(stdin)
	if err != nil {
		return Options{}, err
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := os.Setenv(k, env[k]); err != nil {
			return Options{}, usagef("--env-stdin: %q: %v", k, err)
		}
	}
	client, err := agentproto.NewClient(server, token, agentproto.ClientOptions{InsecureHTTP: s.InsecureHTTP, CAFile: s.CAFile})
	if err != nil {
		return Options{}, &UsageError{Err: err}
	}
	self, err := os.Executable()
	if err != nil {
		return Options{}, err
	}
	var so *slurm.Options
	if s.SLURMConfig != "" {
		o, ignored, err := slurm.ReadOptions(s.SLURMConfig)
		if err != nil {
			return Options{}, usagef("--slurm-config: %v", err)
		}
		if len(ignored) > 0 {
			fmt.Fprintf(log, "%s: %s: %s: the server's keys, not the login node's; ignored\n", s.Name, s.SLURMConfig, strings.Join(ignored, ", "))
		}
		if o.JobPython, err = ProgramPath(o.JobPython); err != nil {
			return Options{}, usagef("--slurm-config: job_python: %v", err)
		}
		so = &o
	}
	if s.Socket == "" && s.Backend == "" {
		// The server answers a claim only for the backend its token was
		// issued to: without a name every claim would be refused.
		return Options{}, usagef("give --backend NAME, the agent backend of model_training.backends that this agent serves (or set POTATO_TRAINING_BACKEND)")
	}
	var allowed []string
	for _, p := range s.AllowExec {
		abs, err := AbsPath(p)
		if err != nil {
			return Options{}, usagef("--allow-exec %s: %v", p, err)
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return Options{}, usagef("--allow-exec %s: not a program that can be run here", p)
		}
		allowed = append(allowed, abs)
	}
	return Options{Client: client, ExecAllowed: allowed, Backend: s.Backend, Workdir: s.Workdir, Python: s.Python,
		Once: s.Once, Keep: s.Keep, Worker: self, Lost: lost, Log: log, Name: s.Name, AllowExec: s.Socket != "", SLURM: so,
		Unreachable: unreachable(), Polling: s.Socket == "", Env: env}, nil
}

// absPaths makes the path settings absolute, against the directory the
// agent was started in, and expands a leading ~/. Python stays a name to
// look up on PATH when it has no slash. Socket is left as it is: only the
// agent itself dials it, from where it was started, and a unix socket's
// address has room for 107 bytes, which the absolute form of a short
// relative path can exceed.
func (s *Settings) absPaths() error {
	for _, f := range []struct {
		name string
		p    *string
	}{{"--workdir", &s.Workdir}, {"--token-file", &s.TokenFile}, {"--slurm-config", &s.SLURMConfig}, {"--ca-file", &s.CAFile}} {
		if *f.p == "" {
			continue
		}
		abs, err := AbsPath(*f.p)
		if err != nil {
			return fmt.Errorf("%s %s: %v", f.name, *f.p, err)
		}
		*f.p = abs
	}
	python, err := ProgramPath(s.Python)
	if err != nil {
		return fmt.Errorf("--python %s: %v", s.Python, err)
	}
	s.Python = python
	return nil
}

func (s *Settings) credentials(stdin io.Reader) (server, token string, env map[string]string, lost chan struct{}, err error) {
	lost = make(chan struct{})
	switch {
	case s.Socket != "":
		server = "unix:" + s.Socket
		r := bufio.NewReader(stdin)
		line, rerr := r.ReadString('\n')
		token = strings.TrimSpace(line)
		if token == "" {
			return "", "", nil, nil, usagef("--socket: no token on standard input (%v)", rerr)
		}
		if s.EnvStdin {
			if env, err = readEnvLine(r); err != nil {
				return "", "", nil, nil, usagef("--env-stdin: %v", err)
			}
		}
		go func() {
			_, _ = io.Copy(io.Discard, r)
			close(lost)
		}()
		return server, token, env, lost, nil
	case s.EnvStdin:
		return "", "", nil, nil, usagef("--env-stdin goes with --socket")
	case s.Server == "":
		return "", "", nil, nil, usagef("give --server URL (or --socket PATH)")
	}
	server = s.Server
	if s.TokenFile != "" {
		token, err = readTokenFile(s.TokenFile)
		if err != nil {
			return "", "", nil, nil, usagef("--token-file: %v", err)
		}
	} else {
		token = strings.TrimSpace(os.Getenv("POTATO_TRAINING_TOKEN"))
	}
	if token == "" {
		return "", "", nil, nil, usagef("no token: set POTATO_TRAINING_TOKEN or give --token-file")
	}
	return server, token, nil, lost, nil
}

// readEnvLine reads the line of --env-stdin: a JSON object of variable
// names and string values. A name that is not a shell variable's, or a
// value with a NUL byte, is refused.
func readEnvLine(r *bufio.Reader) (map[string]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("no variables on the line after the token (%v)", err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(line), &env); err != nil {
		return nil, fmt.Errorf("the line after the token is not a JSON object of strings: %v", err)
	}
	for k, v := range env {
		if !slurm.ValidEnvName(k) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%q is not a variable name, or its value holds a NUL byte", k)
		}
	}
	return env, nil
}

// readTokenFile reads a token file, refusing one that other users could
// read or change (rundir.ReadSecret).
func readTokenFile(path string) (string, error) { return rundir.ReadSecret(path) }

// unreachable is how long the server may be out of reach during a job;
// POTATO_TRAINING_UNREACHABLE_S shortens G9's 300 s (for tests).
func unreachable() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("POTATO_TRAINING_UNREACHABLE_S")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return DefaultUnreachable
}
