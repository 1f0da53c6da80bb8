package slurmshim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

var scontrolOpts = []optSpec{
	{"all", 'a', false}, {"details", 'd', false}, {"help", 'h', false}, {"oneliner", 'o', false},
	{"quiet", 'Q', false}, {"usage", 0, false}, {"verbose", 'v', false}, {"version", 'V', false},
}

const scontrolUsage = `Usage: scontrol [-o|--oneliner] [-d|--details] show job [job_id]
       scontrol ping
       scontrol version
See potato-slurm-shim(1).
`

func runScontrol(p *proc, args []string) int {
	opts, rest, err := getopt(p.name, scontrolOpts, args, true)
	if err != nil {
		return p.usage(err, 1)
	}
	oneliner := false
	for _, o := range opts {
		if p.informational(o.name, scontrolUsage) {
			return 0
		}
		switch o.name {
		case "oneliner":
			oneliner = true
		}
	}
	if len(rest) == 0 {
		fmt.Fprint(p.stderr, scontrolUsage)
		return 1
	}
	switch strings.ToLower(rest[0]) {
	case "version":
		fmt.Fprintln(p.stdout, slurmVersion)
		return 0
	case "ping":
		if _, err := openStore(); err != nil {
			p.errorf("%v", err)
			return 1
		}
		fmt.Fprintln(p.stdout, "Slurmctld(primary) at shim is UP")
		return 0
	case "show":
	default:
		if isScontrolKeyword(rest[0]) {
			p.errorf("potato-slurm-shim does not implement \"%s\"", rest[0])
			return 1
		}
		fmt.Fprintf(p.stderr, "invalid keyword: %s\n", rest[0])
		return 1
	}
	if len(rest) < 2 {
		fmt.Fprintln(p.stderr, "too few arguments for keyword:show")
		return 1
	}
	switch strings.ToLower(rest[1]) {
	case "job", "jobs", "jobid":
	default:
		p.errorf("potato-slurm-shim does not implement \"show %s\"", rest[1])
		return 1
	}
	id := 0
	if len(rest) > 2 {
		var ok bool
		if id, ok = parseJobID(rest[2]); !ok {
			fmt.Fprintln(p.stderr, "scontrol_print_job error: Invalid job id specified")
			return 1
		}
	}
	st, err := openStore()
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	jobs, err := loadForReading(st)
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	now := time.Now()
	shown := 0
	for _, j := range jobs {
		if id != 0 && j.ID != id {
			continue
		}
		lines := showJob(j, now)
		if oneliner {
			var all []string
			for _, l := range lines {
				all = append(all, l...)
			}
			fmt.Fprintln(p.stdout, strings.Join(all, " "))
		} else {
			for k, l := range lines {
				if k > 0 {
					fmt.Fprint(p.stdout, "   ")
				}
				fmt.Fprintln(p.stdout, strings.Join(l, " "))
			}
			fmt.Fprintln(p.stdout)
		}
		shown++
	}
	if shown == 0 {
		if id != 0 {
			fmt.Fprintln(p.stderr, "slurm_load_jobs error: Invalid job id specified")
			return 1
		}
		fmt.Fprintln(p.stdout, "No jobs in the system")
	}
	return 0
}

func isScontrolKeyword(s string) bool {
	switch strings.ToLower(s) {
	case "update", "hold", "release", "requeue", "requeuehold", "suspend", "resume",
		"top", "uhold", "listpids", "notify", "reconfigure", "shutdown", "create", "delete", "abort":
		return true
	}
	return false
}

// showJob lays a job out as scontrol show job does, one slice per line.
func showJob(j *job, now time.Time) [][]string {
	nodeList, batchHost := "(null)", ""
	if j.Node != "" {
		nodeList, batchHost = j.Node, j.Node
	}
	end := j.endEstimate()
	tres := fmt.Sprintf("cpu=%d,node=1,billing=%d", j.cpus(), j.cpus())
	minMem := "0"
	if j.MemMB > 0 {
		minMem = strconv.FormatInt(j.MemMB, 10) + "M"
		tres = fmt.Sprintf("cpu=%d,mem=%s,node=1,billing=%d", j.cpus(), minMem, j.cpus())
	}
	if j.GPUs > 0 {
		tres += fmt.Sprintf(",gres/gpu=%d", j.GPUs)
	}
	kv := func(k, v string) string { return k + "=" + v }
	lines := [][]string{
		{kv("JobId", strconv.Itoa(j.ID)), kv("JobName", j.Name)},
		{kv("UserId", fmt.Sprintf("%s(%d)", j.User, j.UID)), kv("GroupId", fmt.Sprintf("%s(%d)", j.Group, j.GID)), "MCS_label=N/A"},
		{kv("Priority", strconv.Itoa(1)), "Nice=0", kv("Account", orNull(j.Account)), kv("QOS", orNull(j.QOS))},
		{kv("JobState", j.State), kv("Reason", j.Reason), "Dependency=(null)"},
		{kv("Requeue", boolDigit(j.Requeue)), kv("Restarts", strconv.Itoa(j.Restarts)), "BatchFlag=1", "Reboot=0",
			kv("ExitCode", fmt.Sprintf("%d:%d", j.ExitStatus, j.ExitSignal))},
		{kv("RunTime", scontrolDuration(j.runSecs(now))), kv("TimeLimit", j.limitString(false)), "TimeMin=N/A"},
		{kv("SubmitTime", stamp(j.SubmitTime)), kv("EligibleTime", stamp(j.EligibleTime))},
		{kv("AccrueTime", stamp(j.SubmitTime))},
		{kv("StartTime", stamp(j.StartTime)), kv("EndTime", stamp(end)), "Deadline=N/A"},
		{"SuspendTime=None", "SecsPreSuspend=0", kv("LastSchedEval", stamp(j.SubmitTime)), "Scheduler=Main"},
		{kv("Partition", j.Partition), kv("AllocNode:Sid", j.SubmitHost+":0")},
		{"ReqNodeList=(null)", "ExcNodeList=(null)"},
		{kv("NodeList", nodeList)},
	}
	if batchHost != "" {
		lines = append(lines, []string{kv("BatchHost", batchHost)})
	}
	cpt := "1"
	if j.CPUs > 0 {
		cpt = strconv.Itoa(j.CPUs)
	}
	lines = append(lines,
		[]string{"NumNodes=1", kv("NumCPUs", strconv.Itoa(j.cpus())), "NumTasks=1", kv("CPUs/Task", cpt), "ReqB:S:C:T=0:0:*:*"},
		[]string{kv("TRES", tres)},
		[]string{"Socks/Node=*", "NtasksPerN:B:S:C=0:0:*:*", "CoreSpec=*"},
		[]string{kv("MinCPUsNode", cpt), kv("MinMemoryNode", minMem), "MinTmpDiskNode=0"},
		[]string{kv("Features", orNull(j.Constraint)), "DelayBoot=00:00:00"},
		[]string{"OverSubscribe=OK", "Contiguous=0", "Licenses=(null)", "Network=(null)"},
		[]string{kv("Command", j.Command)},
		[]string{kv("WorkDir", j.WorkDir)},
		[]string{kv("StdErr", j.StdErr)},
		[]string{"StdIn=/dev/null"},
		[]string{kv("StdOut", j.StdOut)},
		[]string{"Power="},
	)
	if j.GPUs > 0 {
		lines = append(lines, []string{kv("TresPerNode", tresPerNode(j))})
	}
	return lines
}
