// Host probing of an ssh run: the probe and its tail, which asks whether the
// agent and the venv under remote_dir may be reused; the choice of the
// GPU; and the venv of the backend's packages.

package ssh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"potato-training/lib/backend"
	"potato-training/lib/config"
	"potato-training/lib/gpu"
	"potato-training/lib/probe"
	"potato-training/lib/shell"
	"potato-training/lib/sshx"
	"potato-training/lib/trainer"
	"potato-training/lib/trainer/hf"
)

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
	case hf.LLMName:
		return hf.LLMPackages(params)
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
