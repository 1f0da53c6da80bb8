package agent

import (
	"errors"
	"fmt"
	"time"

	"potato-training/lib/check"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer"
)

// Texts of the agent check (SPEC G5, F10).
const (
	msgNoToken  = "no token issued yet"
	msgRegister = "issue one with: potato training register %s %s"
	msgStart    = "start the agent on the training machine: potato training agent --server URL --backend %s (with the token that potato training register printed)"
)

// defaultHeartbeat is heartbeat_timeout_s when the backend leaves it out.
const defaultHeartbeat = 120

// Check checks an agent backend (SPEC G5, F10) from its token record in
// training/agents/: whether a token was issued, and when and from which
// host an agent last polled. The server records a visit at most every 10
// seconds while an agent long-polls for work, so an agent seen within
// heartbeat_timeout_s is taken to be polling. A run can start when one is
// polling, or when one is busy with a run of this backend (it polls again
// when that run ends); otherwise a run would wait in the queue.
func Check(cfg *config.Config, b *config.Backend, now time.Time, j check.Judged) check.Report {
	r := agentReport(cfg, b, now)
	var verdicts []check.Verdict
	for _, name := range check.Candidates(j) {
		v := check.Verdict{Trainer: name, OK: r.OK, Device: "the agent's machine"}
		if !trainer.UsesGPU(name) {
			v.Device = "the CPU of the agent's machine"
		}
		switch {
		case check.LocalOnly(name) != "":
			v.OK, v.Reason, v.Device = false, check.LocalOnly(name), ""
		case !r.OK:
			v.Reason = r.Problems[0]
		case check.IsPython(name):
			v.Note = "its packages on the agent's machine cannot be seen from here"
		case trainer.IsExec(name):
			v.Note = "the agent runs it only when its --allow-exec names it"
		}
		verdicts = append(verdicts, v)
	}
	check.Conclude(&r, j, verdicts, label(b))
	return r
}

func agentReport(cfg *config.Config, b *config.Backend, now time.Time) check.Report {
	r := check.Report{Backend: b.Name, Type: b.Type, GPUs: []check.GPUInfo{}, Warnings: []string{}, Problems: []string{}}
	fail := func(msg string, hints ...string) check.Report {
		r.Summary = label(b) + ": " + msg
		r.Problems = append(r.Problems, msg)
		r.Hints = append(r.Hints, hints...)
		return r
	}
	root := &rundir.Root{Dir: cfg.TrainingDir()}
	rec, err := root.Agent(b.Name)
	if errors.Is(err, rundir.ErrNoToken) {
		return fail(msgNoToken, fmt.Sprintf(msgRegister, b.Name, cfg.Path))
	}
	if err != nil {
		return fail(err.Error())
	}
	issued := rec.IssuedAt
	r.TokenIssuedAt = &issued
	r.LastSeen, r.LastHost = rec.LastSeen, rec.LastHost
	window := time.Duration(b.HeartbeatTimeoutS) * time.Second
	if window <= 0 {
		window = defaultHeartbeat * time.Second
	}
	if rec.LastSeen != nil {
		a := max(int64(now.Sub(*rec.LastSeen)/time.Second), 0)
		r.LastSeenAgoS = &a
		r.AgentPolling = now.Sub(*rec.LastSeen) <= window
	}
	if id := runningOn(root, b.Name); id != "" {
		r.AgentRun = id
	}
	switch {
	case r.AgentPolling:
		r.OK = true
		r.Summary = fmt.Sprintf("%s: an agent on %s is polling for work", label(b), check.HostOr(rec.LastHost))
	case r.AgentRun != "":
		r.OK = true
		r.Summary = fmt.Sprintf("%s: an agent is training run %s", label(b), r.AgentRun)
	case rec.LastSeen == nil:
		return fail(check.MsgNeverSet+", so a run would wait in the queue", fmt.Sprintf(msgStart, b.Name))
	default:
		return fail(fmt.Sprintf("no agent has polled for %s, so a run would wait in the queue", check.Ago(*r.LastSeenAgoS)),
			fmt.Sprintf(msgStart, b.Name))
	}
	return r
}

// runningOn is the run of backend that an agent has claimed and not
// finished, or "".
func runningOn(root *rundir.Root, backend string) string {
	infos, err := root.List()
	if err != nil {
		return ""
	}
	for _, i := range infos {
		if i.Backend == backend && !i.Finished && !i.Gone && (i.State == rundir.StateRunning || i.State == rundir.StateFetching) {
			return i.RunID
		}
	}
	return ""
}
