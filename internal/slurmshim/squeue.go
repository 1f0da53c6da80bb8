package slurmshim

import (
	"fmt"
	"io"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"
)

var squeueOpts = []optSpec{
	{"all", 'a', false}, {"format", 'o', true}, {"Format", 'O', true}, {"help", 0, false},
	{"jobs", 'j', true}, {"long", 'l', false}, {"me", 0, false}, {"name", 'n', true},
	{"noheader", 'h', false}, {"partition", 'p', true}, {"states", 't', true},
	{"usage", 0, false}, {"user", 'u', true}, {"version", 'V', false},
}

const squeueUsage = `Usage: squeue [-j jobs] [-u users] [-t states] [-p partitions] [-n names]
              [-o format | -O fields] [-h] [-l] [--me]
See potato-slurm-shim(1).
`

const (
	defaultSqueueFormat = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
	longSqueueFormat    = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
	slurmVersion        = "slurm 22.05.8"
)

// defaultStates are the states squeue lists without -t.
var defaultStates = []string{statePending, stateRunning, "SUSPENDED", stateCompleting, "CONFIGURING"}

// jobField is one column squeue can print.
type jobField struct {
	header string
	value  func(j *job, now time.Time) string
}

func na(t time.Time) string {
	if t.IsZero() {
		return "N/A"
	}
	return t.Format(timeStamp)
}

func orNull(s string) string {
	if s == "" {
		return "(null)"
	}
	return s
}

func reasonList(j *job) string {
	switch j.State {
	case statePending, stateFailed, stateTimeout, stateNodeFail, stateOOM, statePreempted:
		return "(" + j.Reason + ")"
	}
	return j.Node
}

func tresPerNode(j *job) string {
	if j.GPUs == 0 {
		return "N/A"
	}
	if j.GresType != "" {
		return fmt.Sprintf("gres:gpu:%s:%d", j.GresType, j.GPUs)
	}
	return fmt.Sprintf("gres:gpu:%d", j.GPUs)
}

var (
	fJobID     = jobField{"JOBID", func(j *job, _ time.Time) string { return strconv.Itoa(j.ID) }}
	fState     = jobField{"STATE", func(j *job, _ time.Time) string { return j.State }}
	fCompact   = jobField{"ST", func(j *job, _ time.Time) string { return compactStates[j.State] }}
	fReason    = jobField{"REASON", func(j *job, _ time.Time) string { return j.Reason }}
	fNodeList  = jobField{"NODELIST", func(j *job, _ time.Time) string { return j.Node }}
	fReasons   = jobField{"NODELIST(REASON)", func(j *job, _ time.Time) string { return reasonList(j) }}
	fTimeUsed  = jobField{"TIME", func(j *job, now time.Time) string { return squeueDuration(j.runSecs(now)) }}
	fTimeLimit = jobField{"TIME_LIMIT", func(j *job, _ time.Time) string { return j.limitString(true) }}
	fTimeLeft  = jobField{"TIME_LEFT", func(j *job, now time.Time) string {
		if j.TimeLimitS == 0 {
			return "UNLIMITED"
		}
		return squeueDuration(max(0, j.TimeLimitS-j.runSecs(now)))
	}}
	fName      = jobField{"NAME", func(j *job, _ time.Time) string { return j.Name }}
	fPartition = jobField{"PARTITION", func(j *job, _ time.Time) string { return j.Partition }}
	fUser      = jobField{"USER", func(j *job, _ time.Time) string { return j.User }}
	fUID       = jobField{"UID", func(j *job, _ time.Time) string { return strconv.Itoa(j.UID) }}
	fNodes     = jobField{"NODES", func(j *job, _ time.Time) string { return "1" }}
	fCPUs      = jobField{"CPUS", func(j *job, _ time.Time) string { return strconv.Itoa(j.cpus()) }}
	fAccount   = jobField{"ACCOUNT", func(j *job, _ time.Time) string { return orNull(j.Account) }}
	fQOS       = jobField{"QOS", func(j *job, _ time.Time) string { return orNull(j.QOS) }}
	fFeatures  = jobField{"FEATURES", func(j *job, _ time.Time) string { return orNull(j.Constraint) }}
	fMinMemory = jobField{"MIN_MEMORY", func(j *job, _ time.Time) string {
		if j.MemMB == 0 {
			return "0"
		}
		return strconv.FormatInt(j.MemMB, 10) + "M"
	}}
	fTres     = jobField{"TRES_PER_NODE", func(j *job, _ time.Time) string { return tresPerNode(j) }}
	fWorkDir  = jobField{"WORK_DIR", func(j *job, _ time.Time) string { return j.WorkDir }}
	fCommand  = jobField{"COMMAND", func(j *job, _ time.Time) string { return j.Command }}
	fStdOut   = jobField{"STDOUT", func(j *job, _ time.Time) string { return j.StdOut }}
	fStdErr   = jobField{"STDERR", func(j *job, _ time.Time) string { return j.StdErr }}
	fSubmit   = jobField{"SUBMIT_TIME", func(j *job, _ time.Time) string { return na(j.SubmitTime) }}
	fStart    = jobField{"START_TIME", func(j *job, _ time.Time) string { return na(j.StartTime) }}
	fEnd      = jobField{"END_TIME", func(j *job, _ time.Time) string { return na(j.endEstimate()) }}
	fExitCode = jobField{"EXIT_CODE", func(j *job, _ time.Time) string { return fmt.Sprintf("%d:%d", j.ExitStatus, j.ExitSignal) }}
	fRestarts = jobField{"RESTARTCNT", func(j *job, _ time.Time) string { return strconv.Itoa(j.Restarts) }}
	fRequeue  = jobField{"REQUEUE", func(j *job, _ time.Time) string { return boolDigit(j.Requeue) }}
	fComment  = jobField{"COMMENT", func(j *job, _ time.Time) string { return "(null)" }}
)

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// shortFields are squeue -o's letters.
var shortFields = map[byte]jobField{
	'i': fJobID, 'A': fJobID, 'F': fJobID, 'T': fState, 't': fCompact, 'r': fReason,
	'N': fNodeList, 'R': fReasons, 'M': fTimeUsed, 'l': fTimeLimit, 'L': fTimeLeft,
	'j': fName, 'P': fPartition, 'u': fUser, 'U': fUID, 'D': fNodes, 'C': fCPUs,
	'a': fAccount, 'q': fQOS, 'f': fFeatures, 'm': fMinMemory, 'b': fTres, 'Z': fWorkDir,
	'o': fCommand, 'V': fSubmit, 'S': fStart, 'e': fEnd, 'k': fComment, 'B': fNodeList,
}

// longFields are squeue -O's names, lowercased.
var longFields = map[string]jobField{
	"jobid": fJobID, "state": fState, "statecompact": fCompact, "reason": fReason,
	"nodelist": fNodeList, "reasonlist": fReasons, "timeused": fTimeUsed, "timelimit": fTimeLimit,
	"timeleft": fTimeLeft, "name": fName, "partition": fPartition, "username": fUser,
	"userid": fUID, "numnodes": fNodes, "numcpus": fCPUs, "account": fAccount, "qos": fQOS,
	"feature": fFeatures, "minmemory": fMinMemory, "tres-per-node": fTres, "workdir": fWorkDir,
	"command": fCommand, "stdout": fStdOut, "stderr": fStdErr, "submittime": fSubmit,
	"starttime": fStart, "endtime": fEnd, "exit_code": fExitCode, "restartcnt": fRestarts,
	"requeue": fRequeue, "comment": fComment, "batchhost": fNodeList,
}

// column is one field of an output format with its layout.
type column struct {
	field  jobField
	width  int // 0: as wide as the value
	right  bool
	prefix string // literal text before the field
}

func (c column) cell(s string) string {
	if c.width == 0 {
		return s
	}
	if len(s) > c.width {
		s = s[:c.width]
	}
	if c.right {
		return fmt.Sprintf("%*s", c.width, s)
	}
	return fmt.Sprintf("%-*s", c.width, s)
}

// parseShortFormat reads an -o format: literal text and %[.][size]type.
func parseShortFormat(f string) ([]column, string, error) {
	var cols []column
	lit := ""
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			lit += string(f[i])
			continue
		}
		i++
		c := column{prefix: lit}
		lit = ""
		if i < len(f) && f[i] == '.' {
			c.right = true
			i++
		}
		for i < len(f) && f[i] >= '0' && f[i] <= '9' {
			c.width = c.width*10 + int(f[i]-'0')
			i++
		}
		if i >= len(f) {
			return nil, "", fmt.Errorf("Invalid job format specification: %s", f)
		}
		if f[i] == '%' {
			c.prefix += "%"
			lit = c.prefix
			continue
		}
		field, ok := shortFields[f[i]]
		if !ok {
			return nil, "", fmt.Errorf("Invalid job format specification: %c", f[i])
		}
		c.field = field
		cols = append(cols, c)
	}
	return cols, lit, nil
}

// parseLongFormat reads an -O list: type[:[.][size][suffix]], 20 wide by default.
func parseLongFormat(f string) ([]column, string, error) {
	var cols []column
	suffix := ""
	for _, item := range strings.Split(f, ",") {
		name, spec, _ := strings.Cut(item, ":")
		field, ok := longFields[strings.ToLower(strings.TrimSpace(name))]
		if !ok {
			return nil, "", fmt.Errorf("Invalid job format specification: %s", name)
		}
		c := column{field: field, width: 20, prefix: suffix}
		suffix = ""
		if strings.HasPrefix(spec, ".") {
			c.right, spec = true, spec[1:]
		}
		k := 0
		for k < len(spec) && spec[k] >= '0' && spec[k] <= '9' {
			k++
		}
		if k > 0 {
			c.width, _ = strconv.Atoi(spec[:k])
		}
		suffix = spec[k:]
		cols = append(cols, c)
	}
	return cols, suffix, nil
}

func runSqueue(p *proc, args []string) int {
	opts, rest, err := getopt(p.name, squeueOpts, args, true)
	if err != nil {
		return p.usage(err, 1)
	}
	format, long := defaultSqueueFormat, ""
	header := true
	var ids []int
	var users, states, parts, names []string
	for _, o := range opts {
		if p.informational(o.name, squeueUsage) {
			return 0
		}
		switch o.name {
		case "format":
			format, long = o.val, ""
		case "Format":
			long = o.val
		case "long":
			format = longSqueueFormat
		case "noheader":
			header = false
		case "jobs":
			for _, s := range strings.Split(o.val, ",") {
				id, ok := parseJobID(s)
				if !ok {
					p.errorf("Invalid job id: %s", s)
					return 1
				}
				ids = append(ids, id)
			}
		case "user":
			users = append(users, strings.Split(o.val, ",")...)
		case "me":
			if u, err := user.Current(); err == nil {
				users = append(users, u.Username)
			}
		case "states":
			for _, s := range strings.Split(o.val, ",") {
				st, ok := parseState(s)
				if !ok {
					p.errorf("Invalid job state specified: %s", s)
					p.errorf("Valid job states include: PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING")
					return 1
				}
				states = append(states, st...)
			}
		case "partition":
			parts = append(parts, strings.Split(o.val, ",")...)
		case "name":
			names = append(names, strings.Split(o.val, ",")...)
		}
	}
	if len(rest) > 0 {
		p.errorf("Unrecognized option: %s", rest[0])
		fmt.Fprintf(p.stderr, "Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]\n")
		return 1
	}
	var cols []column
	var tail string
	if long != "" {
		cols, tail, err = parseLongFormat(long)
	} else {
		cols, tail, err = parseShortFormat(format)
	}
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	if len(states) == 0 {
		states = defaultStates
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
	if len(ids) == 1 && !slices.ContainsFunc(jobs, func(j *job) bool { return j.ID == ids[0] }) {
		fmt.Fprintln(p.stderr, "slurm_load_jobs error: Invalid job id specified")
		return 1
	}
	now := time.Now()
	if header {
		if format == longSqueueFormat && long == "" {
			fmt.Fprintln(p.stdout, now.Format("Mon Jan 02 15:04:05 2006"))
		}
		printRow(p.stdout, cols, tail, func(c column) string { return c.field.header })
	}
	for _, j := range jobs {
		if !slices.Contains(states, j.State) ||
			len(ids) > 0 && !slices.Contains(ids, j.ID) ||
			len(users) > 0 && !slices.Contains(users, j.User) && !slices.Contains(users, strconv.Itoa(j.UID)) ||
			len(parts) > 0 && !slices.Contains(parts, j.Partition) ||
			len(names) > 0 && !slices.Contains(names, j.Name) {
			continue
		}
		printRow(p.stdout, cols, tail, func(c column) string { return c.field.value(j, now) })
	}
	return 0
}

func printRow(w io.Writer, cols []column, tail string, val func(column) string) {
	var b strings.Builder
	for _, c := range cols {
		b.WriteString(c.prefix)
		b.WriteString(c.cell(val(c)))
	}
	b.WriteString(tail)
	fmt.Fprintln(w, b.String())
}

// parseState reads one -t value: a state name or its compact code, or "all".
func parseState(s string) ([]string, bool) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if u == "ALL" {
		var all []string
		for st := range compactStates {
			all = append(all, st)
		}
		return all, true
	}
	for st, code := range compactStates {
		if u == st || u == code {
			return []string{st}, true
		}
	}
	return nil, false
}

// loadForReading purges expired jobs and reads every job, under the lock.
func loadForReading(st *store) ([]*job, error) {
	if err := st.Lock(); err != nil {
		return nil, err
	}
	defer st.Unlock()
	st.Purge(time.Now())
	return st.All()
}
