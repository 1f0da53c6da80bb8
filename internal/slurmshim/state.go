package slurmshim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/atomicfile"
)

// EnvDir names the state directory; every verb needs it.
const EnvDir = "POTATO_SLURM_SHIM_DIR"

// Job states, as SLURM names them.
const (
	statePending    = "PENDING"
	stateRunning    = "RUNNING"
	stateCompleting = "COMPLETING"
	stateCompleted  = "COMPLETED"
	stateFailed     = "FAILED"
	stateCancelled  = "CANCELLED"
	stateTimeout    = "TIMEOUT"
	stateNodeFail   = "NODE_FAIL"
	statePreempted  = "PREEMPTED"
	stateOOM        = "OUT_OF_MEMORY"
)

// compactStates maps a state to the code squeue's %t prints.
var compactStates = map[string]string{
	statePending: "PD", stateRunning: "R", "SUSPENDED": "S", stateCompleting: "CG",
	stateCompleted: "CD", "CONFIGURING": "CF", stateCancelled: "CA", stateFailed: "F",
	stateTimeout: "TO", statePreempted: "PR", stateNodeFail: "NF", stateOOM: "OOM",
	"BOOT_FAIL": "BF", "DEADLINE": "DL",
}

// active reports whether a job still holds or waits for resources.
func active(state string) bool {
	return state == statePending || state == stateRunning || state == stateCompleting
}

// shimConfig is DIR/config.json; potato-slurm-shim init writes it.
type shimConfig struct {
	Slots         int      `json:"slots"`
	GPUs          []string `json:"gpus"`
	Partitions    []string `json:"partitions"`
	Node          string   `json:"node"`
	Cluster       string   `json:"cluster,omitempty"`
	MinJobAgeS    float64  `json:"min_job_age_s"`
	KillWaitS     float64  `json:"kill_wait_s"`
	FirstID       int      `json:"first_id"`
	RequeueDelayS float64  `json:"requeue_delay_s"`
}

func defaultConfig() shimConfig {
	return shimConfig{Slots: 2, GPUs: []string{"0", "1"}, Partitions: []string{"debug"},
		Node: "shimnode01", MinJobAgeS: 300, KillWaitS: 5, FirstID: 4242, RequeueDelayS: 2}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// killReq is a request, recorded in job.json, that the job's supervisor
// end the job: scancel, a time limit or an injected fault.
type killReq struct {
	Kind    string    `json:"kind"` // cancel, timeout, node_fail, preempted, out_of_memory
	At      time.Time `json:"at"`
	Requeue bool      `json:"requeue,omitempty"`
}

// job is DIR/jobs/ID/job.json.
type job struct {
	ID         int    `json:"id"`
	Name       string `json:"name"`
	User       string `json:"user"`
	UID        int    `json:"uid"`
	Group      string `json:"group"`
	GID        int    `json:"gid"`
	State      string `json:"state"`
	Reason     string `json:"reason"`
	ExitStatus int    `json:"exit_status"`
	ExitSignal int    `json:"exit_signal"`
	Requeue    bool   `json:"requeue"`
	Restarts   int    `json:"restarts"`

	Partition  string   `json:"partition"`
	Account    string   `json:"account,omitempty"`
	QOS        string   `json:"qos,omitempty"`
	Constraint string   `json:"constraint,omitempty"`
	MemMB      int64    `json:"mem_mb,omitempty"`
	CPUs       int      `json:"cpus_per_task,omitempty"`
	GPUs       int      `json:"gpus,omitempty"`
	GresType   string   `json:"gres_type,omitempty"`
	AllocGPUs  []string `json:"alloc_gpus,omitempty"`
	TimeLimitS int64    `json:"time_limit_s"` // 0: UNLIMITED
	Signal     int      `json:"signal,omitempty"`
	SignalSecs int      `json:"signal_secs,omitempty"`
	SignalB    bool     `json:"signal_batch_only,omitempty"`
	OpenAppend bool     `json:"open_append,omitempty"`

	SubmitTime   time.Time `json:"submit_time"`
	EligibleTime time.Time `json:"eligible_time"`
	StartTime    time.Time `json:"start_time,omitzero"`
	EndTime      time.Time `json:"end_time,omitzero"`

	WorkDir    string   `json:"work_dir"`
	SubmitDir  string   `json:"submit_dir"`
	SubmitHost string   `json:"submit_host"`
	StdOut     string   `json:"stdout"`
	StdErr     string   `json:"stderr"`
	Command    string   `json:"command"`
	Args       []string `json:"args,omitempty"`
	Node       string   `json:"node,omitempty"`

	SupervisorPID int      `json:"supervisor_pid,omitempty"`
	PID           int      `json:"pid,omitempty"` // the batch shell, leader of the job's process group
	Kill          *killReq `json:"kill,omitempty"`
}

func (j *job) cpus() int {
	if j.CPUs > 0 {
		return j.CPUs
	}
	return 1
}

// store is the state directory.
type store struct {
	dir  string
	cfg  shimConfig
	lock *os.File
}

var errNoDir = errors.New(EnvDir + " is not set: potato-slurm-shim keeps its jobs in that directory")

// openStore reads $POTATO_SLURM_SHIM_DIR and its config.json (defaults
// when absent), creating the directory when it does not exist.
func openStore() (*store, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return nil, errNoDir
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	return &store{dir: dir, cfg: cfg}, nil
}

func readConfig(dir string) (shimConfig, error) {
	cfg := defaultConfig()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	if len(cfg.Partitions) == 0 {
		cfg.Partitions = []string{"debug"}
	}
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	return cfg, nil
}

// Lock takes the flock on DIR/lock that every change of state is made under.
func (s *store) Lock() error {
	p := filepath.Join(s.dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		if f, err = os.Open(p); err != nil {
			return err
		}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return err
	}
	s.lock = f
	return nil
}

func (s *store) Unlock() {
	if s.lock != nil {
		s.lock.Close() // closing releases the flock
		s.lock = nil
	}
}

func (s *store) jobDir(id int) string { return filepath.Join(s.dir, "jobs", strconv.Itoa(id)) }

func (s *store) Load(id int) (*job, error) {
	b, err := os.ReadFile(filepath.Join(s.jobDir(id), "job.json"))
	if err != nil {
		return nil, err
	}
	var j job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("job %d: %w", id, err)
	}
	return &j, nil
}

// Save publishes job.json by write, fsync and rename.
func (s *store) Save(j *job) error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(s.jobDir(j.ID), "job.json"), append(b, '\n'), 0o644)
}

// All returns every job in the directory, in job id order.
func (s *store) All() ([]*job, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "jobs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var jobs []*job
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		j, err := s.Load(id)
		if err != nil {
			continue // being created or removed
		}
		jobs = append(jobs, j)
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].ID < jobs[b].ID })
	return jobs, nil
}

// Purge removes jobs that ended more than MinJobAge ago, as slurmctld
// forgets them. Call it under the lock.
func (s *store) Purge(now time.Time) {
	jobs, _ := s.All()
	for _, j := range jobs {
		if !active(j.State) && !j.EndTime.IsZero() && now.Sub(j.EndTime) >= seconds(s.cfg.MinJobAgeS) {
			os.RemoveAll(s.jobDir(j.ID))
		}
	}
}

// NextID allocates a job id from DIR/next_id. Call it under the lock.
func (s *store) NextID() (int, error) {
	p := filepath.Join(s.dir, "next_id")
	id := s.cfg.FirstID
	if b, err := os.ReadFile(p); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > id {
			id = n
		}
	}
	// Never reuse the id of a job still on disk.
	for {
		if _, err := os.Stat(s.jobDir(id)); errors.Is(err, os.ErrNotExist) {
			break
		}
		id++
	}
	if err := atomicfile.WriteFile(p, []byte(strconv.Itoa(id+1)+"\n"), 0o644); err != nil {
		return 0, err
	}
	return id, nil
}

// parseJobID reads a job id as the commands accept it ("12", "12.batch").
func parseJobID(s string) (int, bool) {
	s, _, _ = strings.Cut(s, ".")
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0
}
