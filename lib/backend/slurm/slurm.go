// Package slurm is the backend of a SLURM cluster reached through its
// login node (SPEC section 6). The start is the ssh backend's: one
// ControlMaster connection, the agent copied to remote_dir/code/<hash>
// and started with the run's socket forwarded; the agent on the login
// node then submits the training process with sbatch and follows it
// (lib/agent), so this package only adapts the ssh backend.
package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"potato-training/lib/agentproto"
	"potato-training/lib/backend"
	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/config"
	"potato-training/lib/probe"
	"potato-training/lib/slurm"
	"potato-training/lib/sshx"
)

// MsgNoCommand is F8: "login.cluster.example.org has no sbatch on PATH,
// so it cannot submit jobs".
const MsgNoCommand = "%s has no %s on PATH, so it cannot %s"

// HintPath is F8's fix.
const HintPath = "set PATH under the backend's env (model_training.backends.%s.env) to a PATH that has it"

// Required are the commands a login node must have (M2), with what each
// is for.
var Required = []struct{ Name, For string }{
	{"sbatch", "submit jobs"},
	{"squeue", "follow its jobs"},
	{"scancel", "cancel its jobs"},
}

// New returns the backend of b.
func New(b *config.Backend) *sshbackend.Backend {
	return sshbackend.NewFlavored(b, &flavor{b: b, opt: slurm.FromBackend(b)})
}

type flavor struct {
	b   *config.Backend
	opt slurm.Options
}

// MissingCommands is F8 for each required command the probe did not find.
func MissingCommands(b *config.Backend, f probe.Facts) []string {
	var out []string
	for _, c := range Required {
		if f.Commands[c.Name] == "" {
			out = append(out, fmt.Sprintf(MsgNoCommand, b.Host, c.Name, c.For))
		}
	}
	return out
}

// Host refuses a login node without sbatch, squeue or scancel (F8) and
// sets the device: GPUs come from gres, which the scheduler turns into
// CUDA_VISIBLE_DEVICES (M3).
func (f *flavor) Host(logf func(format string, args ...any), facts probe.Facts) (string, error) {
	if missing := MissingCommands(f.b, facts); len(missing) > 0 {
		return "", &backend.HintError{Err: errors.New(missing[0]), Hints: []string{fmt.Sprintf(HintPath, f.b.Name)}}
	}
	if facts.Commands["scontrol"] == "" {
		logf("warning: %s has no scontrol on PATH: the reason a job ended is read from slurm.out only", f.b.Host)
	}
	py := f.opt.JobPython
	if py == "" {
		py = f.b.Python
	}
	logf("the job runs %s on the compute node (job_python)", py)
	if f.opt.WithGPU() {
		logf("GPUs: gres %s, CUDA_VISIBLE_DEVICES set by the scheduler", f.opt.Gres)
		return "cuda", nil
	}
	logf("no gres: the job trains on the CPUs SLURM gives it")
	return "cpu", nil
}

func (f *flavor) Python() string {
	if f.opt.JobPython != "" {
		return f.opt.JobPython
	}
	return f.b.Python
}

// AgentArgs writes the backend's SLURM keys as slurm.json into the job
// directory and points the agent at it. The env is left out: its values
// reach the agent on its standard input, with the token.
func (f *flavor) AgentArgs(ctx context.Context, conn *sshx.Conn, jobDir string) ([]string, error) {
	opt := f.opt
	opt.Env = nil
	b, err := json.Marshal(opt)
	if err != nil {
		return nil, err
	}
	path := jobDir + "/slurm.json"
	cmd := "umask 077 && mkdir -p " + jobDir + " && cat >" + path
	if _, stderr, err := conn.Run(ctx, cmd, strings.NewReader(string(b))); err != nil {
		return nil, fmt.Errorf("writing slurm.json on %s: %v: %s", f.b.Host, err, strings.TrimSpace(string(stderr)))
	}
	return []string{"--slurm-config", path}, nil
}

// ResultError turns an agent's report that the scheduler ended the job
// (M7, F9), or that the job left no exit_code, into the run's failure,
// whatever events the training process sent.
func (f *flavor) ResultError(res agentproto.Result) error {
	if res.JobFailure() {
		return errors.New(res.Error)
	}
	return nil
}

// HostCheck is what potato-check reports of a login node (M4).
type HostCheck struct {
	Problems []string
	Warnings []string
	Hints    []string
}

// CheckHost judges a login node's facts for potato-check: the commands
// on PATH, scontrol where present, remote_dir not under /tmp.
func CheckHost(b *config.Backend, f probe.Facts) HostCheck {
	var c HostCheck
	c.Problems = MissingCommands(b, f)
	if len(c.Problems) > 0 {
		c.Hints = append(c.Hints, fmt.Sprintf(HintPath, b.Name))
	}
	if f.Commands["scontrol"] == "" {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s has no scontrol on PATH: the reason a job ended is read from slurm.out only", b.Host))
	}
	if d := strings.TrimSuffix(b.RemoteDir, "/"); d == "/tmp" || d == "/var/tmp" || strings.HasPrefix(d, "/tmp/") || strings.HasPrefix(d, "/var/tmp/") {
		under := "/tmp"
		if strings.HasPrefix(d, "/var/tmp") {
			under = "/var/tmp"
		}
		c.Problems = append(c.Problems, fmt.Sprintf("remote_dir %s is under %s, which the compute nodes do not share with the login node", b.RemoteDir, under))
	}
	return c
}
