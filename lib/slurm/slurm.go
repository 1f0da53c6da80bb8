// Package slurm is what the SLURM backend knows of the scheduler (SPEC
// section 6): the sbatch arguments of a backend, the job script, and
// readers of squeue's and scontrol's output that turn a job's end into the
// reason the run log gives. It only builds command lines and reads their
// output; lib/agent runs them. srun and sacct are never used (M2).
package slurm

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"potato-training/lib/config"
)

// Options are a backend's SLURM keys: what the dispatch hands the agent on
// the login node, and what slurm.json holds for an agent started by hand
// (M9). Their names are the config keys.
type Options struct {
	JobPython     string            `json:"job_python,omitempty"`
	Partition     string            `json:"partition,omitempty"`
	Gres          string            `json:"gres,omitempty"`
	Time          string            `json:"time,omitempty"`
	Account       string            `json:"account,omitempty"`
	QOS           string            `json:"qos,omitempty"`
	CPUsPerTask   int               `json:"cpus_per_task,omitempty"`
	Mem           string            `json:"mem,omitempty"`
	Constraint    string            `json:"constraint,omitempty"`
	Prelude       []string          `json:"prelude,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	NumThreads    int               `json:"num_threads,omitempty"`
	PollIntervalS int               `json:"poll_interval_s,omitempty"`
}

// FromBackend takes the SLURM keys of a configured backend.
func FromBackend(b *config.Backend) Options {
	return Options{
		JobPython: b.JobPython, Partition: b.Partition, Gres: b.Gres, Time: b.Time,
		Account: b.Account, QOS: b.QOS, CPUsPerTask: b.CPUsPerTask, Mem: b.Mem,
		Constraint: b.Constraint, Prelude: b.Prelude, Env: b.Env, NumThreads: b.NumThreads,
		PollIntervalS: b.PollIntervalS,
	}
}

// ReadOptions reads slurm.json: the SLURM keys of Options, or a whole
// slurm backend entry as the config holds it (type, host, python and all,
// potato-config(5)). Of the entry, what applies on a login node is taken:
// the SLURM keys, env and num_threads, and python as the job's interpreter
// when job_python is left out; the keys of the server's ssh connection
// and of the copy back are accepted and returned in ignored, sorted.
// Other keys are refused, as the config refuses them, so a misspelt key
// does not quietly submit without it; so is a type other than slurm.
func ReadOptions(path string) (o Options, ignored []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return o, nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return o, nil, fmt.Errorf("%s: %w", path, err)
	}
	taken := optionKeys()
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		_, isSLURMKey := findKey(config.SLURMKeys, k)
		switch {
		case taken[k] || k == "python":
		case isSLURMKey:
			ignored = append(ignored, k)
		default:
			return o, nil, fmt.Errorf("%s: unknown key %q: the keys are those of a slurm backend (potato-config(5))", path, k)
		}
	}
	var entry struct {
		Options
		Type   *string `json:"type"`
		Python string  `json:"python"`
	}
	// Every key is known by now: this decode checks the values' types.
	if err := json.Unmarshal(data, &entry); err != nil {
		return o, nil, fmt.Errorf("%s: %w", path, err)
	}
	if entry.Type != nil && *entry.Type != config.TypeSLURM {
		return o, nil, fmt.Errorf("%s: type is %q: slurm.json holds the keys of a slurm backend", path, *entry.Type)
	}
	o = entry.Options
	if o.JobPython == "" {
		o.JobPython = entry.Python
	}
	if o.Time != "" {
		if _, _, err := config.ParseSLURMTime(o.Time); err != nil {
			return o, nil, fmt.Errorf("%s: time: %w", path, err)
		}
	}
	if o.CPUsPerTask < 0 || o.PollIntervalS < 0 || o.NumThreads < 0 {
		return o, nil, fmt.Errorf("%s: cpus_per_task, num_threads and poll_interval_s cannot be negative", path)
	}
	for k := range o.Env {
		if !ValidEnvName(k) {
			return o, nil, fmt.Errorf("%s: env: %q is not a variable name", path, k)
		}
	}
	return o, ignored, nil
}

// optionKeys are the JSON names of Options' fields.
func optionKeys() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[Options]()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys[name] = true
	}
	return keys
}

func findKey(table []config.Key, name string) (config.Key, bool) {
	for _, k := range table {
		if k.Name == name {
			return k, true
		}
	}
	return config.Key{}, false
}

// ValidEnvName says whether k is a shell variable's name.
func ValidEnvName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// WithGPU reports whether the job asks the scheduler for a GPU (M3: no
// gres, no GPU).
func (o Options) WithGPU() bool {
	for _, g := range strings.Split(o.Gres, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(g), ":")
		if name == "gpu" {
			return true
		}
	}
	return false
}

// JobName is the name a run's job gets, so squeue shows whose it is.
func JobName(runID string) string { return "potato-" + runID }

// SbatchArgs are the arguments of the run's submission, job.sh last:
// sbatch --parsable --job-name=potato-RUN --output=slurm.out --chdir=DIR
// and one option per key that is set (M3).
func (o Options) SbatchArgs(runID, jobDir string) []string {
	args := []string{"--parsable", "--job-name=" + JobName(runID), "--output=slurm.out", "--chdir=" + jobDir}
	return append(append(args, o.Flags()...), "job.sh")
}

// Flags are the scheduler options the keys set, as the run log shows them.
func (o Options) Flags() []string {
	var args []string
	add := func(flag, v string) {
		if v != "" {
			args = append(args, "--"+flag+"="+v)
		}
	}
	add("partition", o.Partition)
	add("gres", o.Gres)
	add("time", o.Time)
	add("account", o.Account)
	add("qos", o.QOS)
	if o.CPUsPerTask > 0 {
		add("cpus-per-task", strconv.Itoa(o.CPUsPerTask))
	}
	add("mem", o.Mem)
	add("constraint", o.Constraint)
	return args
}

// ParseSubmit reads sbatch --parsable's answer: "4242", or "4242;cluster"
// on a federation. The id stays a string: SLURM's ids are not ours to do
// arithmetic on.
func ParseSubmit(out []byte) (string, error) {
	line := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = strings.TrimSpace(line[i+1:]) // sbatch may print warnings first
	}
	id, _, _ := strings.Cut(line, ";")
	if id == "" {
		return "", fmt.Errorf("sbatch printed no job id")
	}
	for _, r := range id {
		if r < '0' || r > '9' {
			return "", fmt.Errorf("sbatch printed %q, not a job id", line)
		}
	}
	return id, nil
}

// EnvFile is the file of the job directory that holds the backend's env
// for job.sh: mode 0600, written by the agent before sbatch and removed
// once the job has left the queue, so that no secret of env (HF_TOKEN)
// stays on the cluster's shared storage or is ever in job.sh.
const EnvFile = "job.env"

// EnvScript is EnvFile's content: one export line a variable of env.
func (o Options) EnvScript() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(o.Env)) {
		fmt.Fprintf(&b, "export %s=%s\n", k, Quote(o.Env[k]))
	}
	return b.String()
}

// Script is job.sh: the prelude lines, the backend's env (sourced from
// EnvFile), cd to the job
// directory, then the training process with its events to events.jsonl
// and its standard error to stderr.log. exit_code is written last, by
// rename, also when SIGTERM ends the job: a plain scancel and a time
// limit signal the batch shell only, so the shell passes TERM on to the
// training process and waits for it. A requeued job starts again from
// the top, so a stale exit_code goes first.
//
// command is the training process's argv; env are extra variables
// (device, threads), set after the backend's env.
func (o Options) Script(runID, jobDir string, command []string, env []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	fmt.Fprintf(&b, "# The training process of run %s, written by potato-agent; see potato-agent(1).\n", runID)
	if len(o.Prelude) > 0 {
		b.WriteString("# prelude\n")
		for _, l := range o.Prelude {
			b.WriteString(l + "\n")
		}
	}
	if len(o.Env) > 0 {
		// The values stay out of job.sh, which sbatch keeps and shows
		// to whoever may read the job: EnvFile holds them.
		fmt.Fprintf(&b, ". %s || exit 1\n", Quote(jobDir+"/"+EnvFile))
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, Quote(v))
	}
	fmt.Fprintf(&b, "cd %s || exit 1\n", Quote(jobDir))
	b.WriteString(`rm -f exit_code .exit_code.tmp
child=
trap 'if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; fi' TERM
trap 'if [ -n "$child" ]; then kill -INT "$child" 2>/dev/null; fi' INT
`)
	var argv []string
	for _, a := range command {
		argv = append(argv, Quote(a))
	}
	fmt.Fprintf(&b, "%s </dev/null >>events.jsonl 2>>stderr.log &\n", strings.Join(argv, " "))
	b.WriteString(`child=$!
# A trapped signal interrupts wait with a status above 128: wait again
# while the training process is still there. When it has ended meanwhile
# (scancel --full signals it too), wait once more for its own status,
# which the shell kept; 127 means the shell had none to give.
while :; do
	wait "$child"
	status=$?
	if [ "$status" -gt 128 ] && kill -0 "$child" 2>/dev/null; then
		continue
	fi
	if [ "$status" -gt 128 ]; then
		wait "$child" 2>/dev/null
		again=$?
		if [ "$again" -ne 127 ]; then
			status=$again
		fi
	fi
	break
done
printf '%s\n' "$status" >.exit_code.tmp && mv -f .exit_code.tmp exit_code
exit "$status"
`)
	return b.String()
}

// Quote makes s one single-quoted shell word.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
