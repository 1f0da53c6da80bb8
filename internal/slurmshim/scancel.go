package slurmshim

import (
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var scancelOpts = []optSpec{
	{"batch", 'b', false}, {"full", 'f', false}, {"help", 0, false}, {"jobname", 0, true},
	{"me", 0, false}, {"name", 'n', true}, {"partition", 'p', true}, {"quiet", 'Q', false},
	{"signal", 's', true}, {"state", 't', true}, {"usage", 0, false}, {"user", 'u', true},
	{"verbose", 'v', false}, {"version", 'V', false},
}

const scancelUsage = `Usage: scancel [-b|--batch] [-f|--full] [-s|--signal=name|number]
               [-n|--name=job_name] [-p|--partition=partition] [-t|--state=state]
               [-u|--user=user_name] [--me] [-Q|--quiet] [job_id...]
See potato-slurm-shim(1).
`

func runScancel(p *proc, args []string) int {
	opts, rest, err := getopt(p.name, scancelOpts, args, true)
	if err != nil {
		return p.usage(err, 1)
	}
	var full, batch, quiet bool
	sig := 0
	var users, names, parts, states []string
	for _, o := range opts {
		if p.informational(o.name, scancelUsage) {
			return 0
		}
		switch o.name {
		case "batch":
			batch = true
		case "full":
			full = true
		case "quiet":
			quiet = true
		case "signal":
			n, ok := parseSignal(o.val)
			if !ok {
				fmt.Fprintf(p.stderr, "Unknown job signal: %s\n", o.val)
				return 1
			}
			sig = n
		case "user":
			users = append(users, strings.Split(o.val, ",")...)
		case "me":
			if u, err := user.Current(); err == nil {
				users = append(users, u.Username)
			}
		case "name", "jobname":
			names = append(names, strings.Split(o.val, ",")...)
		case "partition":
			parts = append(parts, strings.Split(o.val, ",")...)
		case "state":
			for _, s := range strings.Split(o.val, ",") {
				st, ok := parseState(s)
				if !ok {
					p.errorf("Invalid job state specified: %s", s)
					return 1
				}
				states = append(states, st...)
			}
		}
	}
	var ids []int
	for _, a := range rest {
		for _, s := range strings.Split(a, ",") {
			id, ok := parseJobID(s)
			if !ok {
				p.errorf("Invalid job id %s", s)
				return 1
			}
			ids = append(ids, id)
		}
	}
	filtered := len(users)+len(names)+len(parts)+len(states) > 0
	if len(ids) == 0 && !filtered {
		p.errorf("No job identification provided")
		return 1
	}
	if sig == int(syscall.SIGKILL) {
		sig = 0 // SIGKILL cancels, as a plain scancel does
	}

	st, err := openStore()
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	if err := st.Lock(); err != nil {
		p.errorf("%v", err)
		return 1
	}
	defer st.Unlock()
	st.Purge(time.Now())
	jobs, err := st.All()
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	match := func(j *job) bool {
		return (len(users) == 0 || slices.Contains(users, j.User) || slices.Contains(users, strconv.Itoa(j.UID))) &&
			(len(names) == 0 || slices.Contains(names, j.Name)) &&
			(len(parts) == 0 || slices.Contains(parts, j.Partition)) &&
			(len(states) == 0 || slices.Contains(states, j.State))
	}
	code := 0
	killErr := func(id int, msg string) {
		if !quiet || msg != "Job/step already completing or completed" {
			p.errorf("Kill job error on job id %d: %s", id, msg)
		}
		code = 1
	}
	var targets []*job
	if len(ids) == 0 {
		for _, j := range jobs {
			if active(j.State) && match(j) {
				targets = append(targets, j)
			}
		}
	}
	for _, id := range ids {
		k := slices.IndexFunc(jobs, func(j *job) bool { return j.ID == id })
		if k < 0 {
			killErr(id, "Invalid job id specified")
			continue
		}
		if match(jobs[k]) {
			targets = append(targets, jobs[k])
		}
	}
	for _, j := range targets {
		switch {
		case !active(j.State) || j.State == stateCompleting:
			killErr(j.ID, "Job/step already completing or completed")
		case sig != 0 && j.State == statePending:
			killErr(j.ID, "Job can not be altered now, try again later")
		case sig != 0 && full:
			syscall.Kill(-j.PID, syscall.Signal(sig))
		case sig != 0 && batch:
			syscall.Kill(j.PID, syscall.Signal(sig))
		case sig != 0:
			// Without --full or --batch a signal goes to the job's steps;
			// a batch job run without srun has none, so nothing is sent.
		case j.State == statePending:
			j.State, j.Reason, j.EndTime = stateCancelled, "None", time.Now()
			if err := st.Save(j); err != nil {
				p.errorf("%v", err)
				code = 1
			}
		default:
			// The supervisor ends the job and writes slurmstepd's line.
			j.Kill = &killReq{Kind: "cancel", At: time.Now()}
			if err := st.Save(j); err != nil {
				p.errorf("%v", err)
				code = 1
			}
		}
	}
	return code
}
