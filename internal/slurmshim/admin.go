package slurmshim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/atomicfile"
)

// passCmd lists an imitated command in --help; the binary's main
// dispatches to it (Imitate) before kong sees the arguments.
type passCmd struct {
	Args []string `arg:"" optional:"" passthrough:"" help:"The command's own options and operands."`
}

type shimCmd struct {
	Init      initCmd          `cmd:"" help:"Write the state directory's config.json."`
	Fail      failCmd          `cmd:"" help:"End a running job as the scheduler would on a fault."`
	List      listCmd          `cmd:"" help:"List every job the state directory holds."`
	WaitIdle  waitIdleCmd      `cmd:"" name:"wait-idle" help:"Wait until no job is pending, running or completing."`
	Supervise superviseCmd     `cmd:"" name:"_supervise" hidden:"" help:"Run one job (started by sbatch)."`
	Sbatch    passCmd          `cmd:"" help:"Submit a batch script, as sbatch(1)."`
	Squeue    passCmd          `cmd:"" help:"List queued and running jobs, as squeue(1)."`
	Scancel   passCmd          `cmd:"" help:"Cancel or signal jobs, as scancel(1)."`
	Scontrol  passCmd          `cmd:"" help:"Show a job, as scontrol(1) show job."`
	Version   kong.VersionFlag `help:"Print the version and exit."`
}

// Main runs the shim's own commands (init, fail, list, wait-idle and the
// hidden _supervise) and returns the exit status.
func Main(env cli.Env) int {
	return cli.Main(Name,
		"Stand in for SLURM's sbatch, squeue, scancel and scontrol, running jobs as local processes; the state directory is $"+EnvDir+".",
		"potato-slurm-shim(1)", &shimCmd{}, env)
}

func storeOrFail() (*store, error) {
	st, err := openStore()
	if err != nil {
		return nil, cli.Failf(cli.ExitNo, "%v", err).WithHint("set %s to a directory the jobs' users can write", EnvDir)
	}
	return st, nil
}

type initCmd struct {
	Slots        int     `help:"Jobs that may run at once." default:"2"`
	GPUs         string  `name:"gpus" help:"The GPU pool, a comma list of device indexes (empty: none)." default:"0,1"`
	Partitions   string  `help:"Partition names, comma separated; the first is the default." default:"debug"`
	Node         string  `help:"The node name jobs run on." default:"shimnode01"`
	Cluster      string  `help:"Cluster name that sbatch --parsable adds after the id."`
	MinJobAge    float64 `name:"min-job-age" help:"Seconds a finished job stays visible." default:"300"`
	KillWait     float64 `name:"kill-wait" help:"Seconds from SIGTERM to SIGKILL." default:"5"`
	FirstID      int     `name:"first-id" help:"The first job id." default:"4242"`
	RequeueDelay float64 `name:"requeue-delay" help:"Seconds a requeued job waits before it may start again." default:"2"`
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c *initCmd) Run(ctx *cli.Context) error {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return cli.Failf(cli.ExitUsage, "%v", errNoDir)
	}
	cfg := shimConfig{Slots: c.Slots, GPUs: splitList(c.GPUs), Partitions: splitList(c.Partitions),
		Node: c.Node, Cluster: c.Cluster, MinJobAgeS: c.MinJobAge, KillWaitS: c.KillWait,
		FirstID: c.FirstID, RequeueDelayS: c.RequeueDelay}
	switch {
	case cfg.Slots < 1:
		return cli.Failf(cli.ExitUsage, "--slots must be at least 1")
	case len(cfg.Partitions) == 0:
		return cli.Failf(cli.ExitUsage, "--partitions names no partition")
	case cfg.Node == "":
		return cli.Failf(cli.ExitUsage, "--node is empty")
	case cfg.FirstID < 1:
		return cli.Failf(cli.ExitUsage, "--first-id must be at least 1")
	case cfg.MinJobAgeS < 0 || cfg.KillWaitS < 0 || cfg.RequeueDelayS < 0:
		return cli.Failf(cli.ExitUsage, "--min-job-age, --kill-wait and --requeue-delay must not be negative")
	}
	if cfg.GPUs == nil {
		cfg.GPUs = []string{}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'), 0o644)
}

type failCmd struct {
	ID      int    `arg:"" help:"The job id."`
	Kind    string `arg:"" enum:"node_fail,preempted,out_of_memory" help:"node_fail, preempted or out_of_memory."`
	Requeue bool   `help:"Requeue the job (node_fail and preempted, unless it was submitted with --no-requeue)."`
}

func (c *failCmd) Run(ctx *cli.Context) error {
	if c.Requeue && c.Kind == "out_of_memory" {
		return cli.Failf(cli.ExitUsage, "--requeue applies to node_fail and preempted only")
	}
	st, err := storeOrFail()
	if err != nil {
		return err
	}
	if err := st.Lock(); err != nil {
		return err
	}
	defer st.Unlock()
	j, err := st.Load(c.ID)
	if err != nil {
		return cli.Failf(cli.ExitNo, "no job %d in %s", c.ID, st.dir)
	}
	if j.State != stateRunning || j.Kill != nil {
		return cli.Failf(cli.ExitNo, "job %d is %s, not RUNNING", c.ID, j.State)
	}
	j.Kill = &killReq{Kind: c.Kind, At: time.Now(), Requeue: c.Requeue}
	return st.Save(j)
}

type listCmd struct{}

// Run prints one line per job: id, state, reason, exit code, restarts, name.
func (c *listCmd) Run(ctx *cli.Context) error {
	st, err := storeOrFail()
	if err != nil {
		return err
	}
	jobs, err := loadForReading(st)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		fmt.Fprintf(ctx.Stdout, "%d\t%s\t%s\t%d:%d\t%d\t%s\n", j.ID, j.State, j.Reason, j.ExitStatus, j.ExitSignal, j.Restarts, j.Name)
	}
	return nil
}

type waitIdleCmd struct {
	Timeout time.Duration `help:"Give up after this long." default:"60s"`
}

func (c *waitIdleCmd) Run(ctx *cli.Context) error {
	st, err := storeOrFail()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(c.Timeout)
	for {
		jobs, err := loadForReading(st)
		if err != nil {
			return err
		}
		var busy []string
		for _, j := range jobs {
			if active(j.State) {
				busy = append(busy, strconv.Itoa(j.ID)+" "+j.State)
			}
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return cli.Failf(cli.ExitNo, "jobs still active after %v: %s", c.Timeout, strings.Join(busy, ", "))
		}
		time.Sleep(pollEvery)
	}
}

type superviseCmd struct {
	ID int `arg:""`
}

func (c *superviseCmd) Run(ctx *cli.Context) error { return supervise(c.ID) }

func (c *passCmd) Run(ctx *cli.Context) error {
	return cli.Exit(2) // main hands these names to Imitate before kong parses
}
