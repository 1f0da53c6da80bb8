// Package ssh is the backend of a GPU server reached with an ssh key (SPEC
// section 5): one ControlMaster connection per run carries the probe, the
// copy of the toolkit's agent, the agent's session with its reverse
// forward of the run's socket, and the copy of the model back.
package ssh

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	"potato-training/lib/backend/remote"
	"potato-training/lib/bundle"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/rundir"
	"potato-training/lib/shell"
	"potato-training/lib/sshx"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/hf"
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

// StallTimeout is how long the copy of the model may send nothing; the
// environment variable POTATO_TRAINING_STALL_TIMEOUT_S overrides it (tests).
var StallTimeout = 180 * time.Second

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

// pathPrefix exports the env's PATH, the one variable of it that the
// copy back uses: a path, not a secret, on the command lines of ssh and
// rsync.
func pathPrefix(b *config.Backend) string {
	if p, ok := b.Env["PATH"]; ok {
		return "export PATH=" + shell.Quote(p) + "; "
	}
	return ""
}

// makeVenv builds, once, the virtual environment of the backend's
// packages under remote_dir (SPEC S3): made with --system-site-packages so
// the host's own torch stays visible, the packages installed with its pip,
// then renamed into place, so a half-made environment is never used. Its
// name hashes the interpreter and the package list.
func (s *execution) makeVenv(ctx context.Context) error {
	s.python = s.b.Python
	if len(s.b.Packages) == 0 {
		return nil
	}
	if s.facts.PythonMissing {
		return s.facts.PythonError(s.b.Host)
	}
	name := venvName(s.b)
	root := remoteWord(s.b.RemoteDir)
	dir := root + "/" + name
	if s.venv.bad != "" {
		return fmt.Errorf(msgNotOurs, s.venv.bad, s.b.Host, "its Python")
	}
	if s.venv.state == reuseOK {
		s.run.Sink.Logf("packages: using %s on %s", name, s.b.Host)
		s.python = s.b.RemoteDir + "/" + name + "/bin/python" // the agent expands a leading ~/
		return nil
	}
	s.run.Sink.Step(fmt.Sprintf("installing the packages on %s", s.b.Host))
	tmp := dir + ".tmp-" + randHex(4)
	var pkgs []string
	for _, p := range s.b.Packages {
		pkgs = append(pkgs, shell.Quote(p))
	}
	// The script, with the env's values, goes on standard input.
	cmd := "umask 077\n" + envPrefix(s.b) + "\nmkdir -p " + root + " && " + shell.Quote(s.b.Python) + " -m venv --system-site-packages " + tmp +
		" && " + tmp + "/bin/python -m pip install --quiet --disable-pip-version-check " + strings.Join(pkgs, " ") +
		// pip makes its scripts readable by all, whatever the umask.
		" && chmod -R go-rwx " + tmp +
		" && { mv " + tmp + " " + dir + " 2>/dev/null || rm -rf " + tmp + "; }\n"
	if _, stderr, err := s.conn.Run(ctx, "sh -s", strings.NewReader(cmd)); err != nil {
		_, _, _ = s.conn.Run(ctx, "rm -rf "+tmp, nil)
		return fmt.Errorf("installing %s on %s: %v: %s", strings.Join(s.b.Packages, " "), s.b.Host, err, sshx.LastLine(string(stderr)))
	}
	s.run.Sink.Logf("packages: made %s on %s with %s", name, s.b.Host, strings.Join(s.b.Packages, " "))
	s.python = s.b.RemoteDir + "/" + name + "/bin/python" // the agent expands a leading ~/
	return nil
}

// venvName is the name of the backend's venv under remote_dir: it hashes
// the interpreter and the package list.
func venvName(b *config.Backend) string {
	sum := sha256.Sum256([]byte(b.Python + "\x00" + strings.Join(b.Packages, "\x00")))
	return "venv-" + hex.EncodeToString(sum[:6])
}

// Probe runs the probe script on the host with the backend's env.
func Probe(ctx context.Context, conn *sshx.Conn, b *config.Backend, packages []string) (probe.Facts, error) {
	f, _, err := probeWith(ctx, conn, b, packages, true, "")
	return f, err
}

// probeWith is Probe, with torch's facts only when torch is true or
// packages names torch, and tail, shell commands run after the probe in
// the same session, whose output follows the report; it returns that
// output too.
func probeWith(ctx context.Context, conn *sshx.Conn, b *config.Backend, packages []string, torch bool, tail string) (probe.Facts, []byte, error) {
	script := envPrefix(b) + probe.ScriptFor(b.Python, packages, torch) + tail
	out, _, err := conn.Run(ctx, "sh -s", strings.NewReader(script))
	if err != nil {
		return probe.Facts{}, nil, err
	}
	f, err := probe.Parse(out)
	if err != nil {
		return f, nil, fmt.Errorf("%s: %w", b.Host, err)
	}
	return f, out, nil
}

// Marks of the probe's tail: one line for the agent and one for the venv
// when they are on the host, then the answer (reuseCheck).
const (
	codeMark = "potato-code"
	venvMark = "potato-venv"
	openMark = "potato-remote-dir-open"
)

// msgNotOurs refuses to run what another user could have put in place:
// the path, the host and what would have run.
const msgNotOurs = "%q on %s belongs to another user or others may write to it: refusing to run %s; remove it (or chmod go-w it), or set remote_dir to a directory of your own"

// The states of what a run would reuse under remote_dir.
const (
	reuseAbsent = ""
	reuseOK     = "ok"
	reuseStale  = "stale" // the agent does not match its digest
	reuseNoSum  = "nosum" // no sha256sum or shasum to check it with
	reuseBad    = "bad"   // owned by another user or writable by others
)

// reuse is the probe tail's answer about the agent or the venv; bad
// names the first entry found that another user owns or others may
// write to.
type reuse struct{ state, bad string }

// reuseFuncs are the shell functions of reuseCheck: the first entry of a
// tree that another user owns, then the first (not a symlink) that group
// or others may write to, as sshd's StrictModes judges a key file.
const reuseFuncs = `potato_bad() {
	{ find "$@" ! -user "$(id -u)" -print 2>/dev/null; find "$@" ! -type l \( -perm -0020 -o -perm -0002 \) -print 2>/dev/null; } | head -n 1
}
potato_sum() {
	if command -v sha256sum >/dev/null 2>&1; then sha256sum <"$1" 2>/dev/null | cut -d ' ' -f 1
	elif command -v shasum >/dev/null 2>&1; then shasum -a 256 <"$1" 2>/dev/null | cut -d ' ' -f 1
	else echo nosum; fi
}
`

// codeCheck is the shell that judges the agent remote_dir/code/SUM before
// it is reused: code/ and the agent's directory must be the login user's
// and writable by nobody else, and the agent must have the digest its
// directory is named after.
func codeCheck(root, sum string) string {
	c := remoteWord(root + "/code/" + sum)
	code := remoteWord(root + "/code")
	return "c=" + c + "\nb=\nif test -e " + code + "; then b=$(potato_bad " + code + " -maxdepth 0); fi\n" +
		"if [ -z \"$b\" ] && { test -e \"$c\" || test -L \"$c\"; }; then b=$(potato_bad \"$c\"); fi\n" +
		"if [ -n \"$b\" ]; then echo " + codeMark + " " + reuseBad + " \"$b\"\n" +
		"elif test -e \"$c\"; then\n" +
		"\tcase $(potato_sum \"$c/potato-agent\") in " + sum + ") echo " + codeMark + " " + reuseOK + " ;; nosum) echo " + codeMark + " " + reuseNoSum + " ;; *) echo " + codeMark + " " + reuseStale + " ;; esac\n" +
		"fi\n"
}

// venvCheck is the shell that judges the venv before it is reused: every
// entry of it must be the login user's and writable by nobody else.
func venvCheck(dir string) string {
	return "v=" + dir + "\nif test -e \"$v\" || test -L \"$v\"; then\n" +
		"\tb=$(potato_bad \"$v\")\n" +
		"\tif [ -n \"$b\" ]; then echo " + venvMark + " " + reuseBad + " \"$b\"; elif test -x \"$v/bin/python\"; then echo " + venvMark + " " + reuseOK + "; fi\nfi\n"
}

// rootCheck says whether group or others may write to remote_dir itself
// (a sticky directory such as /tmp aside): they could then replace what
// runs from it.
func rootCheck(root string) string {
	return "if test -n \"$(find " + remoteWord(root) + " -maxdepth 0 \\( -perm -0020 -o -perm -0002 \\) ! -perm -1000 -print 2>/dev/null)\"; then echo " + openMark + "; fi\n"
}

// reuseOf reads the answer of a check for mark.
func reuseOf(out []byte, mark string) reuse {
	for _, l := range strings.Split(string(out), "\n") {
		rest, ok := strings.CutPrefix(l, mark+" ")
		if !ok {
			continue
		}
		state, bad, _ := strings.Cut(rest, " ")
		return reuse{state: state, bad: bad}
	}
	return reuse{}
}

// probeTail asks, in the probe's session rather than in commands of their
// own, whether the host has this machine's agent (when its digest is
// known) and the backend's venv, and whether they may be reused: each a
// round trip less before the run starts. The answers count only where
// the host's architecture turns out to be this machine's (the agent) and
// where a venv is wanted.
func (s *execution) probeTail() string {
	tail := reuseFuncs + rootCheck(s.b.RemoteDir)
	if a := <-s.localAgent; a.err == nil {
		s.localAgent <- a
		tail += codeCheck(strings.TrimSuffix(s.b.RemoteDir, "/"), a.sum)
	} else {
		s.localAgent <- a
	}
	if len(s.b.Packages) > 0 && s.flavor == nil {
		tail += venvCheck(remoteWord(s.b.RemoteDir) + "/" + venvName(s.b))
	}
	return tail
}

func hasLine(out []byte, mark string) bool {
	return slices.Contains(strings.Split(string(out), "\n"), mark)
}

func (s *execution) probe(ctx context.Context) (probe.Facts, error) {
	info, _ := trainer.Lookup(s.spec.Trainer)
	// A program named by exec: brings its own interpreter, if any.
	info.Builtin = info.Builtin || trainer.IsExec(s.spec.Trainer)
	// A flavored host (a login node) does not run Python trainers itself.
	needPython := !info.Builtin && s.flavor == nil
	var pkgs []string
	if needPython {
		pkgs = TrainerPackages(s.spec.Trainer, s.spec.Params)
	}
	// A run that uses no Python on the host (a built-in or exec: trainer,
	// no packages) starts none to report it, a tenth of a second less
	// before its first event; torch's facts matter only to a trainer that
	// uses torch on this host.
	noPython := !needPython && s.flavor == nil && len(s.b.Packages) == 0
	b := s.b
	if noPython {
		c := *s.b
		c.Python = ""
		b = &c
	}
	f, out, err := probeWith(ctx, s.conn, b, pkgs, s.flavor == nil && NeedsTorch(s.spec.Trainer, s.spec.Params), s.probeTail())
	if err != nil {
		return f, err
	}
	s.code, s.venv = reuseOf(out, codeMark), reuseOf(out, venvMark)
	if hasLine(out, openMark) {
		s.run.Sink.Logf("warning: group or others may write to remote_dir %s on %s: they could replace what runs from it", s.b.RemoteDir, s.b.Host)
	}
	switch {
	case noPython:
		s.run.Sink.Logf("%s: %s %s", s.b.Host, f.OS, f.Arch)
	case f.PythonMissing && needPython:
		return f, f.PythonError(s.b.Host)
	case f.PythonMissing:
		s.run.Sink.Logf("%s: %s, no %s (the agent there needs none)", s.b.Host, f.OS+" "+f.Arch, s.b.Python)
	default:
		s.run.Sink.Logf("%s: %s %s, Python %s (%s)", s.b.Host, f.OS, f.Arch, f.PythonVersion, f.Python)
	}
	if f.NvidiaSMIError != "" {
		s.run.Sink.Logf("warning: nvidia-smi on %s: %s: training on its CPU unless a GPU is pinned", s.b.Host, f.NvidiaSMIError)
	}
	if f.TorchError != "" {
		s.run.Sink.Logf("warning: torch on %s does not import: %s", s.b.Host, f.TorchError)
	}
	if len(f.Missing) > 0 && needPython {
		msg, hint := probe.ImportError(s.spec.Trainer, f.Missing)
		return f, &backend.HintError{Err: errors.New(msg), Hints: []string{hint}}
	}
	return f, nil
}

// TrainerPackages are the import names a Python trainer needs with these
// parameters (nil: its defaults).
func TrainerPackages(name string, params map[string]string) []string {
	switch name {
	case hf.Name:
		return hf.Packages(params)
	}
	return nil
}

// chooseDevice applies gpus: auto, a pin, or none (SPEC S4) and logs the
// GPU obtained (S7).
func (s *execution) chooseDevice() error {
	if !trainer.UsesGPU(s.spec.Trainer) {
		s.spec.Limits.Device = "cpu"
		s.run.Sink.Logf("%s uses no GPU: training on the CPU of %s", s.spec.Trainer, s.b.Host)
		return nil
	}
	dev, notes, err := ChooseDevice(s.b, s.facts, NeedsTorch(s.spec.Trainer, s.spec.Params))
	for _, n := range notes {
		s.run.Sink.Logf("%s", n)
	}
	if err != nil {
		return err
	}
	s.spec.Limits.Device = dev
	return nil
}

// NeedsTorch is whether a trainer imports torch, so that the host's torch
// decides which GPUs it can use.
func NeedsTorch(trainer string, params map[string]string) bool {
	return slices.Contains(TrainerPackages(trainer, params), "torch")
}

// ChooseDevice is the device a run on b gets, given the host's facts:
// "cuda:N", "cuda:N,M" or "cpu", with lines for the run log. needsTorch
// says whether the run's trainer uses torch: only then do the host's torch
// kernels matter. gpus: auto with a CPU build of torch trains on the CPU,
// with a warning; GPUs pinned for it are refused.
func ChooseDevice(b *config.Backend, f probe.Facts, needsTorch bool) (string, []string, error) {
	var notes []string
	gpus := f.GPUs
	usable := f.GPUFilter(needsTorch)
	for _, x := range gpus {
		if !usable(x) {
			notes = append(notes, fmt.Sprintf("GPU %d (%s): %s", x.Index, x.Name, probe.NoKernelsMark))
		}
	}
	cpuTorch := needsTorch && f.CPUTorch() && len(gpus) > 0
	switch g := b.GPUs; {
	case g.None:
		return "cpu", append(notes, "gpus: none: training on the CPU of "+b.Host), nil
	case len(g.Indices) > 0:
		var ids []string
		for _, i := range g.Indices {
			found := false
			for _, x := range gpus {
				if x.Index == i {
					found = true
					notes = append(notes, fmt.Sprintf("GPU obtained: %d (%s, %d MB free)", x.Index, x.Name, x.MemoryFreeMB))
				}
			}
			if !found {
				return "", notes, fmt.Errorf("gpus pins GPU %d, which %s does not have", i, b.Host)
			}
			ids = append(ids, strconv.Itoa(i))
		}
		if cpuTorch {
			return "", notes, fmt.Errorf("gpus pins GPU %s, but the torch %s on %s is a CPU build and cannot use it", strings.Join(ids, ","), f.Torch, b.Host)
		}
		return "cuda:" + strings.Join(ids, ","), notes, nil
	case len(gpus) == 0:
		return "cpu", append(notes, b.Host+" has no GPU: training on its CPU"), nil
	case cpuTorch:
		return "cpu", append(notes, "warning: "+fmt.Sprintf(probe.CPUTorchFormat, f.Torch, "the run", b.Host)), nil
	}
	x, err := gpu.Choose(gpus, b.MinFreeGPUMB, usable)
	if err != nil {
		return "", notes, err
	}
	return "cuda:" + strconv.Itoa(x.Index), append(notes, fmt.Sprintf("GPU obtained: %d (%s, %d MB free)", x.Index, x.Name, x.MemoryFreeMB)), nil
}

// agentBinary is the potato-agent built for the host's architecture: the
// cross-built copy of the build tree (bin/linux-ARCH/potato-agent) or of an
// installation (PREFIX/lib/potato-training/linux-ARCH/potato-agent), or
// this machine's own when the architectures match.
func agentBinary(goarch string) (string, error) {
	if self, err := os.Executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			dir := filepath.Dir(self)
			for _, p := range []string{
				filepath.Join(dir, "linux-"+goarch, "potato-agent"),
				filepath.Join(dir, "..", "lib", "potato-training", "linux-"+goarch, "potato-agent"),
			} {
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
		}
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == goarch {
		return trainer.FindProgram("potato-agent")
	}
	return "", fmt.Errorf("no potato-agent built for linux/%s: run make build", goarch)
}

// agentFile is an agent binary and its sha256.
type agentFile struct {
	path, sum string
	err       error
}

func findAgent(goarch string) agentFile {
	p, err := agentBinary(goarch)
	if err != nil {
		return agentFile{err: err}
	}
	sum, err := fileSHA256(p)
	return agentFile{path: p, sum: sum, err: err}
}

func goarchOf(unameM string) (string, error) {
	switch unameM {
	case "x86_64", "amd64":
		return "amd64", nil
	case "aarch64", "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("no potato-agent for a %s host", unameM)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyCode puts the agent in remote_dir/code/<sha256>/ when the host does
// not have that version yet (SPEC S1): uploaded under a temporary name,
// then renamed into place.
func (s *execution) copyCode(ctx context.Context) error {
	goarch, err := goarchOf(s.facts.Arch)
	if err != nil {
		return err
	}
	// The probe asked about this machine's agent; an agent of another
	// architecture is asked about here.
	a, asked := <-s.localAgent, goarch == runtime.GOARCH
	s.localAgent <- a
	if !asked {
		a = findAgent(goarch)
	}
	if a.err != nil {
		return a.err
	}
	local, sum := a.path, a.sum
	rootPath := strings.TrimSuffix(s.b.RemoteDir, "/")
	s.jobPath = rootPath + "/jobs/" + s.run.Dir.ID
	s.codeDir = remoteWord(rootPath + "/code/" + sum)
	s.jobDir = remoteWord(s.jobPath)
	code := s.code
	if !asked {
		out, _, err := s.conn.Run(ctx, "sh -s", strings.NewReader(reuseFuncs+codeCheck(rootPath, sum)))
		if err != nil {
			return err
		}
		code = reuseOf(out, codeMark)
	}
	switch code.state {
	case reuseOK:
		s.run.Sink.Logf("code %s is on %s already", sum[:12], s.b.Host)
		return nil
	case reuseBad:
		return fmt.Errorf(msgNotOurs, code.bad, s.b.Host, "the agent from it")
	case reuseStale, reuseNoSum:
		why := "does not match its digest"
		if code.state == reuseNoSum {
			why = "cannot be checked (no sha256sum or shasum)"
		}
		s.run.Sink.Logf("the agent in %s/code/%s on %s %s: copying it again", rootPath, sum[:12], s.b.Host, why)
		if _, _, err := s.conn.Run(ctx, "rm -rf "+s.codeDir, nil); err != nil {
			return err
		}
	}
	s.run.Sink.Step(fmt.Sprintf(stepCopyCode, s.b.Host))
	// sshx quotes the paths it is given itself; the shell commands here
	// get shell words, "$HOME"/... for a path under ~/.
	tmpPath := rootPath + "/code/.tmp-" + sum[:12] + "-" + randHex(4)
	tmp := remoteWord(tmpPath)
	if _, _, err := s.conn.Run(ctx, "umask 077 && mkdir -p "+tmp, nil); err != nil {
		return err
	}
	if err := s.conn.Upload(ctx, local, tmpPath+"/potato-agent", 0o700, testRsync()); err != nil {
		_, _, _ = s.conn.Run(ctx, "rm -rf "+tmp, nil)
		return fmt.Errorf("copying the agent to %s: %w", s.b.Host, err)
	}
	// Another run may have put the same version in place meanwhile.
	mv := "mv " + tmp + " " + s.codeDir + " 2>/dev/null || { test -x " + s.codeDir + "/potato-agent && rm -rf " + tmp + "; }"
	if _, _, err := s.conn.Run(ctx, mv, nil); err != nil {
		return err
	}
	s.run.Sink.Logf("copied Potato's code (%s) to %s", sum[:12], s.b.Host)
	return nil
}

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

// Collect copies the model back (SPEC S8) and removes the remote job
// directory after a complete copy. A stalled copy keeps the predictions,
// which the agent uploaded already, and leaves the model on the host (F7).
func (s *execution) Collect(ctx context.Context, _ events.Result) (backend.Collected, error) {
	defer s.closeSession()
	res := s.agent.Reported()
	remoteArtifacts := s.jobPath + "/artifacts" // sshx quotes it
	uri := ""
	if res != nil && res.ArtifactURI != "" {
		uri = res.ArtifactURI
	}
	keep := s.b.KeepRemote
	if !s.b.FetchArtifacts {
		s.keepJob = true
		s.run.Sink.Logf("fetch_artifacts is false: the model stays on %s (%s)", s.b.Host, uri)
		return backend.Collected{ArtifactURI: uri}, nil
	}
	large, err := s.conn.ListLarge(ctx, remoteArtifacts, s.b.MaxArtifactMB)
	if err != nil {
		s.run.Sink.Logf("warning: listing the model files on %s: %v", s.b.Host, err)
	}
	for _, f := range large {
		s.run.Sink.Logf("%s is over max_artifact_mb (%d MB): it stays on %s in %s", f, s.b.MaxArtifactMB, s.b.Host, uri)
	}
	var collected backend.Collected
	if len(large) > 0 {
		keep = true
		collected.ArtifactURI = uri
	}
	step := fmt.Sprintf(stepFetch, s.b.Host)
	s.run.Sink.Step(step)
	stall := StallTimeout
	if v, err := strconv.Atoi(os.Getenv("POTATO_TRAINING_STALL_TIMEOUT_S")); err == nil && v > 0 {
		stall = time.Duration(v) * time.Second
	}
	last := time.Time{}
	var done, total int64
	// The agent that ran the job writes the files as a tar stream on the
	// connection; a copy into artifacts/ that finds the part of a cut one
	// resumes it by rsync, where both ends have it. Of the backend's env
	// only PATH applies to the remote side, to find rsync: the others'
	// values would be on command lines (pathPrefix).
	fetch := func() error {
		return s.conn.Fetch(ctx, s.codeDir+"/potato-agent", remoteArtifacts, s.run.Dir.Path(rundir.ArtifactsDir), sshx.FetchOptions{
			Prefix:       pathPrefix(s.b) + testFetchWrapper(),
			MaxSizeMB:    s.b.MaxArtifactMB,
			MaxTotalMB:   s.b.MaxFetchMB,
			StallTimeout: stall,
			Rsync:        testRsync(),
			Using: func(method string) {
				s.run.Sink.Logf("copying the model from %s by %s", s.b.Host, method)
			},
			Progress: func(d, t int64) {
				done, total = d, t
				if time.Since(last) < 250*time.Millisecond && d < t {
					return
				}
				last = time.Now()
				s.run.Sink.Step(fmt.Sprintf("%s: %s of %s", step, mb(d), mb(t)))
				s.run.Sink.Progress("fetch", float64(d), float64(t))
			},
		})
	}
	err = fetch()
	// A copy cut by a dropped link is tried again on a new connection,
	// which resumes it from the part kept; the last attempt's error
	// decides the run's end. A failed login counts as an attempt.
	for attempt := 2; attempt <= fetchAttempts && s.brokeOff(err) && ctx.Err() == nil; attempt++ {
		s.run.Sink.Logf("the copy from %s broke off at %d of %d MB (%v): trying again in %d s, attempt %d of %d",
			s.b.Host, (done+(1<<19))>>20, (total+(1<<19))>>20, err, int(fetchRetryWait/time.Second), attempt, fetchAttempts)
		select {
		case <-time.After(fetchRetryWait):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if derr := s.redial(ctx); derr != nil {
			s.run.Sink.Logf("warning: connecting to %s again: %v", s.b.Host, derr)
			continue
		}
		err = fetch()
	}
	var stallErr *sshx.StallError
	switch {
	case errors.As(err, &stallErr):
		s.stalled = true
		s.run.Sink.Logf("%v: the run's predictions are already kept; only the model files are missing from artifacts/ (they stay on %s)", err, s.b.Host)
		collected.ArtifactURI = uri
		keep = true
	case err != nil:
		return collected, fmt.Errorf("copying the model from %s: %w", s.b.Host, err)
	}
	if keep {
		s.keepJob = true
		s.run.Sink.Logf("the job directory stays on %s: %s", s.b.Host, uri)
	}
	return collected, nil
}

// The copy back's attempts after a dropped link: how many in all, the
// wait before each new one and the bound of its login.
const (
	fetchAttempts  = 3
	fetchRetryWait = 5 * time.Second
	redialTimeout  = 20 * time.Second
)

// brokeOff says whether a copy back failed with the link: it stalled, ssh
// itself failed (exit status 255) or the master died.
func (s *execution) brokeOff(err error) bool {
	if err == nil {
		return false
	}
	var stallErr *sshx.StallError
	var connErr *sshx.ConnError
	return errors.As(err, &stallErr) || errors.As(err, &connErr) || s.conn.Err() != nil
}

// redial replaces the connection with a new one, its login bounded by
// redialTimeout; the old one is closed once the new one is up, and kept
// when the login fails.
func (s *execution) redial(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, redialTimeout)
	defer cancel()
	conn, err := sshx.Dial(dctx, sshx.TargetOf(s.b), "")
	if err != nil {
		return err
	}
	old := s.conn
	s.conn = conn
	_ = old.Close()
	return nil
}

func mb(n int64) string {
	return fmt.Sprintf("%d MB", (n+(1<<19))>>20)
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
