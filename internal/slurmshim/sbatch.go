package slurmshim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/atomicfile"
	"potato-training/lib/config"
)

// proc is one run of an imitated command, with its own streams so the
// verbs can be tested in-process.
type proc struct {
	name   string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func (p *proc) errorf(format string, a ...any) {
	fmt.Fprintf(p.stderr, "%s: error: "+format+"\n", append([]any{p.name}, a...)...)
}

// informational answers --help, --usage and --version, as every SLURM
// command does, and says whether opt was one of them.
func (p *proc) informational(opt, usage string) bool {
	switch opt {
	case "help", "usage":
		fmt.Fprint(p.stdout, usage)
	case "version":
		fmt.Fprintln(p.stdout, slurmVersion)
	default:
		return false
	}
	return true
}

// usage prints a getopt complaint as the SLURM commands do.
func (p *proc) usage(err error, code int) int {
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(p.stderr, ue.msg)
		fmt.Fprintf(p.stderr, "Try \"%s --help\" for more information\n", p.name)
		return code
	}
	p.errorf("%v", err)
	return 1
}

var sbatchOpts = []optSpec{
	{"account", 'A', true}, {"chdir", 'D', true}, {"constraint", 'C', true},
	{"cpus-per-task", 'c', true}, {"error", 'e', true}, {"export", 0, true},
	{"gpus", 'G', true}, {"gres", 0, true}, {"help", 'h', false}, {"job-name", 'J', true},
	{"mem", 0, true}, {"nodes", 'N', true}, {"no-requeue", 0, false}, {"ntasks", 'n', true},
	{"open-mode", 0, true}, {"output", 'o', true}, {"parsable", 0, false},
	{"partition", 'p', true}, {"qos", 'q', true}, {"quiet", 'Q', false},
	{"requeue", 0, false}, {"signal", 0, true}, {"time", 't', true}, {"usage", 0, false},
	{"version", 'V', false}, {"wrap", 0, true},
}

const sbatchUsage = `Usage: sbatch [OPTIONS...] script [args...]
Options this stand-in (potato-slurm-shim) accepts:
  -A, --account=name  -c, --cpus-per-task=ncpus  -C, --constraint=list
  -D, --chdir=directory  -e, --error=err  --export=ALL (ignored)
  -G, --gpus=[type:]n  --gres=gpu[:type]:n  -J, --job-name=jobname
  --mem=MB[K|M|G|T]  -N, --nodes=1  -n, --ntasks=n  --open-mode=append|truncate
  -o, --output=out  --parsable  -p, --partition=partition  -q, --qos=qos
  -Q, --quiet  --requeue  --no-requeue  --signal=[{R|B}:]num[@time]
  -t, --time=minutes  --wrap=command
See potato-slurm-shim(1).
`

// sbatch exits 255 on a malformed option, as the real one does.
const sbatchBadOption = 255

func runSbatch(p *proc, args []string) int {
	cli, rest, err := getopt(p.name, sbatchOpts, args, false)
	if err != nil {
		return p.usage(err, sbatchBadOption)
	}
	for _, o := range cli {
		if p.informational(o.name, sbatchUsage) {
			return 0
		}
	}
	wrap := ""
	for _, o := range cli {
		if o.name == "wrap" {
			wrap = o.val
		}
	}
	var script []byte
	var scriptPath, defName string
	var scriptArgs []string
	cwd, err := os.Getwd()
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	switch {
	case wrap != "":
		if len(rest) > 0 {
			p.errorf("script argument not permitted with --wrap option")
			return 1
		}
		script = []byte("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n" + wrap + "\n")
		defName = "wrap"
	case len(rest) == 0 || rest[0] == "-":
		script, err = io.ReadAll(p.stdin)
		if err != nil {
			p.errorf("unable to read the script from standard input: %v", err)
			return 1
		}
		defName = "sbatch"
		if len(rest) > 0 {
			scriptArgs = rest[1:]
		}
	default:
		scriptPath, scriptArgs = rest[0], rest[1:]
		script, err = os.ReadFile(scriptPath)
		if err != nil {
			p.errorf("Unable to open file %s", scriptPath)
			return 1
		}
		defName = filepath.Base(scriptPath)
		if !filepath.IsAbs(scriptPath) {
			scriptPath = filepath.Join(cwd, scriptPath)
		}
	}
	if len(bytes.TrimSpace(script)) == 0 {
		p.errorf("Batch script is empty!")
		return 1
	}
	if !bytes.HasPrefix(script, []byte("#!")) {
		p.errorf("This does not look like a batch script.  The first")
		p.errorf("line must start with #! followed by the path to an interpreter.")
		p.errorf("For instance: #!/bin/sh")
		return 1
	}
	inScript, _, err := getopt(p.name, sbatchOpts, sbatchLines(script), true)
	if err != nil {
		return p.usage(err, sbatchBadOption)
	}

	st, err := openStore()
	if err != nil {
		p.errorf("%v", err)
		return 1
	}
	j := &job{Name: defName, Requeue: true, Partition: st.cfg.Partitions[0], Command: scriptPath, Args: scriptArgs}
	if scriptPath == "" {
		j.Command = "(null)"
	}
	var output, errput, chdir string
	parsable := false
	for _, o := range append(inScript, cli...) { // the command line wins
		v := o.val
		switch o.name {
		case "account":
			j.Account = v
		case "chdir":
			chdir = v
		case "constraint":
			j.Constraint = v
		case "cpus-per-task":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				p.errorf("Invalid numeric value \"%s\" for --cpus-per-task.", v)
				return 1
			}
			j.CPUs = n
		case "error":
			errput = v
		case "export":
			// Accepted and ignored: the job always gets sbatch's environment.
		case "gpus":
			typ, n, ok := parseGPUCount(v)
			if !ok {
				p.errorf("Invalid --gpus specification")
				return 1
			}
			j.GresType, j.GPUs = typ, n
		case "gres":
			typ, n, ok := parseGres(v)
			if !ok {
				p.errorf("Invalid generic resource (gres) specification")
				return 1
			}
			j.GresType, j.GPUs = typ, n
		case "job-name":
			j.Name = v
		case "mem":
			mb, ok := parseMem(v)
			if !ok {
				p.errorf("invalid memory constraint %s", v)
				return 1
			}
			j.MemMB = mb
		case "nodes":
			if v != "1" && v != "1-1" {
				p.errorf("Batch job submission failed: Requested node configuration is not available")
				return 1
			}
		case "ntasks":
			if n, err := strconv.Atoi(v); err != nil || n < 1 {
				p.errorf("Invalid numeric value \"%s\" for --ntasks.", v)
				return 1
			}
		case "no-requeue":
			j.Requeue = false
		case "requeue":
			j.Requeue = true
		case "open-mode":
			switch {
			case strings.HasPrefix("append", v) && v != "":
				j.OpenAppend = true
			case strings.HasPrefix("truncate", v) && v != "":
				j.OpenAppend = false
			default:
				p.errorf("Invalid --open-mode argument: %s. Ignored", v)
			}
		case "output":
			output = v
		case "parsable":
			parsable = true
		case "partition":
			j.Partition = v
		case "qos":
			j.QOS = v
		case "signal":
			sig, secs, batch, ok := parseSignalSpec(v)
			if !ok {
				p.errorf("Invalid --signal specification")
				return sbatchBadOption
			}
			j.Signal, j.SignalSecs, j.SignalB = sig, secs, batch
		case "time":
			d, unlimited, err := config.ParseSLURMTime(v)
			if err != nil {
				p.errorf("Invalid --time specification")
				return sbatchBadOption
			}
			j.TimeLimitS = 0
			if !unlimited {
				j.TimeLimitS = int64(d / time.Second)
			}
		}
	}

	known := false
	for _, part := range st.cfg.Partitions {
		known = known || part == j.Partition
	}
	if !known {
		p.errorf("Batch job submission failed: Invalid partition name specified")
		return 1
	}
	if j.GPUs > len(st.cfg.GPUs) {
		p.errorf("Batch job submission failed: Requested node configuration is not available")
		return 1
	}

	j.SubmitDir = cwd
	j.WorkDir = cwd
	if chdir != "" {
		j.WorkDir = chdir
		if !filepath.IsAbs(chdir) {
			j.WorkDir = filepath.Join(cwd, chdir)
		}
	}
	u, err := user.Current()
	if err != nil {
		j.UID, j.GID = os.Getuid(), os.Getgid()
		j.User, j.Group = strconv.Itoa(j.UID), strconv.Itoa(j.GID)
	} else {
		j.User = u.Username
		j.UID, _ = strconv.Atoi(u.Uid)
		j.GID, _ = strconv.Atoi(u.Gid)
		j.Group = u.Gid
		if g, err := user.LookupGroupId(u.Gid); err == nil {
			j.Group = g.Name
		}
	}
	j.SubmitHost, _ = os.Hostname()

	if err := st.Lock(); err != nil {
		p.errorf("%v", err)
		return 1
	}
	now := time.Now()
	st.Purge(now)
	id, err := submit(st, j, script, output, errput, now)
	st.Unlock()
	if err != nil {
		p.errorf("Batch job submission failed: %v", err)
		return 1
	}
	if err := startSupervisor(st, id); err != nil {
		st.Lock()
		if j2, err2 := st.Load(id); err2 == nil && j2.State == statePending {
			j2.State, j2.Reason, j2.EndTime = stateFailed, "JobLaunchFailure", time.Now()
			st.Save(j2)
		}
		st.Unlock()
		p.errorf("Batch job submission failed: starting the job's supervisor: %v", err)
		return 1
	}
	switch {
	case parsable && st.cfg.Cluster != "":
		fmt.Fprintf(p.stdout, "%d;%s\n", id, st.cfg.Cluster)
	case parsable:
		fmt.Fprintf(p.stdout, "%d\n", id)
	default:
		fmt.Fprintf(p.stdout, "Submitted batch job %d\n", id)
	}
	return 0
}

// submit gives the job an id and writes its directory. Call it under the lock.
func submit(st *store, j *job, script []byte, output, errput string, now time.Time) (int, error) {
	id, err := st.NextID()
	if err != nil {
		return 0, err
	}
	j.ID = id
	if output == "" {
		output = "slurm-%j.out"
	}
	if errput == "" {
		errput = output
	}
	j.StdOut = st.expandPath(j, output)
	j.StdErr = st.expandPath(j, errput)
	j.State, j.Reason = statePending, "None"
	j.SubmitTime, j.EligibleTime = now, now
	// jobs/ takes the state directory's mode, so that when it is shared
	// (the tests make it writable for the ssh user) every user can submit.
	jobs := filepath.Join(st.dir, "jobs")
	if err := os.Mkdir(jobs, 0o755); err == nil {
		if fi, err := os.Stat(st.dir); err == nil {
			os.Chmod(jobs, fi.Mode().Perm()|fi.Mode()&os.ModeSticky)
		}
	}
	dir := st.jobDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "script"), script, 0o755); err != nil {
		return 0, err
	}
	env, err := json.Marshal(os.Environ())
	if err != nil {
		return 0, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "environment"), env, 0o600); err != nil {
		return 0, err
	}
	return id, st.Save(j)
}

// expandPath fills in sbatch's filename patterns (%j, %x, %u, %N, %A, %%)
// and makes the name absolute under the job's working directory.
func (st *store) expandPath(j *job, pat string) string {
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		if pat[i] != '%' || i+1 == len(pat) {
			b.WriteByte(pat[i])
			continue
		}
		i++
		switch pat[i] {
		case 'j', 'A':
			b.WriteString(strconv.Itoa(j.ID))
		case 'x':
			b.WriteString(j.Name)
		case 'u':
			b.WriteString(j.User)
		case 'N':
			b.WriteString(st.cfg.Node)
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(pat[i])
		}
	}
	p := b.String()
	if !filepath.IsAbs(p) {
		p = filepath.Join(j.WorkDir, p)
	}
	return p
}

// sbatchLines returns the options of the script's #SBATCH lines, read
// as sbatch does: up to the first line that is not a comment or blank.
func sbatchLines(script []byte) []string {
	var args []string
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			break
		}
		if rest, ok := strings.CutPrefix(line, "#SBATCH"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			args = append(args, shellWords(rest)...)
		}
	}
	return args
}

// parseGres reads --gres: gpu, gpu:N or gpu:TYPE:N (also as a comma list
// with none of other kinds), and none.
func parseGres(v string) (typ string, n int, ok bool) {
	if v == "none" {
		return "", 0, true
	}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimPrefix(item, "gres/")
		parts := strings.Split(item, ":")
		if parts[0] != "gpu" || len(parts) > 3 {
			return "", 0, false
		}
		c := 1
		switch len(parts) {
		case 2:
			var err error
			if c, err = strconv.Atoi(parts[1]); err != nil {
				// gpu:TYPE means one GPU of that type.
				typ, c = parts[1], 1
			}
		case 3:
			var err error
			typ = parts[1]
			if c, err = strconv.Atoi(parts[2]); err != nil {
				return "", 0, false
			}
		}
		if c < 0 {
			return "", 0, false
		}
		n += c
	}
	return typ, n, true
}

// parseGPUCount reads --gpus: N or TYPE:N.
func parseGPUCount(v string) (string, int, bool) {
	typ, num, found := strings.Cut(v, ":")
	if !found {
		typ, num = "", v
	}
	n, err := strconv.Atoi(num)
	return typ, n, err == nil && n >= 0
}

// parseMem reads --mem: a number of megabytes, or with a K, M, G or T suffix.
func parseMem(v string) (int64, bool) {
	mult := int64(1)
	num := strings.ToUpper(v)
	if num == "" {
		return 0, false
	}
	switch num[len(num)-1] {
	case 'K':
		mult, num = -1024, num[:len(num)-1]
	case 'M':
		num = num[:len(num)-1]
	case 'G':
		mult, num = 1024, num[:len(num)-1]
	case 'T':
		mult, num = 1024*1024, num[:len(num)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	if mult < 0 {
		return (n + 1023) / 1024, true
	}
	return n * mult, true
}

var signalNames = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "ABRT": syscall.SIGABRT,
	"KILL": syscall.SIGKILL, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "PIPE": syscall.SIGPIPE,
	"ALRM": syscall.SIGALRM, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT, "STOP": syscall.SIGSTOP,
	"TSTP": syscall.SIGTSTP, "URG": syscall.SIGURG, "XCPU": syscall.SIGXCPU, "XFSZ": syscall.SIGXFSZ,
	"VTALRM": syscall.SIGVTALRM, "PROF": syscall.SIGPROF, "WINCH": syscall.SIGWINCH, "IO": syscall.SIGIO,
	"SYS": syscall.SIGSYS, // and PWR on Linux: signals_linux.go
}

// parseSignal reads a signal as a number, a name, or SIG and a name.
func parseSignal(v string) (int, bool) {
	if n, err := strconv.Atoi(v); err == nil {
		return n, n > 0 && n < 65
	}
	s, ok := signalNames[strings.TrimPrefix(strings.ToUpper(v), "SIG")]
	return int(s), ok
}

// parseSignalSpec reads --signal=[{R|B}:]SIG[@SECS]; SECS defaults to 60.
func parseSignalSpec(v string) (sig, secs int, batch, ok bool) {
	if pre, rest, found := strings.Cut(v, ":"); found {
		switch strings.ToUpper(pre) {
		case "B":
			batch = true
		case "R", "RB", "BR":
			batch = strings.Contains(strings.ToUpper(pre), "B")
		default:
			return 0, 0, false, false
		}
		v = rest
	}
	secs = 60
	if s, t, found := strings.Cut(v, "@"); found {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > 65535 {
			return 0, 0, false, false
		}
		v, secs = s, n
	}
	sig, ok = parseSignal(v)
	return sig, secs, batch, ok
}

// startSupervisor starts "potato-slurm-shim _supervise ID" in its own
// session, detached from sbatch's terminal and streams.
func startSupervisor(st *store, id int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(st.jobDir(id), "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := &exec.Cmd{
		Path:        self,
		Args:        []string{Name, "_supervise", strconv.Itoa(id)},
		Env:         append(os.Environ(), EnvDir+"="+st.dir),
		Dir:         "/",
		Stderr:      logf,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}
