package testproject

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"potato-training/internal/testcli"
)

//go:embed testdata/endless-trainer
var endlessTrainer []byte

var endlessN atomic.Int64

// Endless is a run whose training process fits until the test stops it
// (a fault, a cancel, SIGTERM) or releases it, whatever the machine's
// speed: testdata/endless-trainer. A number of epochs of a real trainer
// is a duration only on a machine of a given speed; this is the fit a
// test starts when something must strike while it is still going on.
type Endless struct {
	// Trainer is its trainer name, exec:DIR/endless-trainer.
	Trainer string
	// ReleaseFile is the file whose creation ends the fit.
	ReleaseFile string
	// Worker is the potato-agent that finishes a released run (a path,
	// or a glob such as REMOTE_DIR/code/*/potato-agent).
	Worker string
}

// NewEndless writes the trainer into dir, which every user who may run
// it can read (for a remote user, a directory such as testcli.SharedDir
// makes), and names its release file there. The release file is one of
// its own each call: releasing one run releases no other.
func NewEndless(t T, dir, worker string) *Endless {
	t.Helper()
	p := filepath.Join(dir, "endless-trainer")
	if _, err := os.Stat(p); err != nil {
		testcli.WriteExecutable(t, p, endlessTrainer)
	}
	return &Endless{Trainer: "exec:" + p, Worker: worker,
		ReleaseFile: filepath.Join(dir, fmt.Sprintf("release-%d", endlessN.Add(1)))}
}

// Program is the trainer's program, for a polling agent's --allow-exec.
func (e *Endless) Program() string { return strings.TrimPrefix(e.Trainer, "exec:") }

// Args are potato-dispatch's arguments for a run of it on schema
// sentiment.
func (e *Endless) Args() []string {
	return []string{"--trainer", e.Trainer, "--schemas", "sentiment",
		"--param", "release=" + e.ReleaseFile, "--param", "worker=" + e.Worker}
}

// Release ends the fit: the built-in trainer finishes the run, which ends
// as a real one does.
func (e *Endless) Release(t T) {
	t.Helper()
	must(t, os.WriteFile(e.ReleaseFile, nil, 0o644))
	must(t, os.Chmod(e.ReleaseFile, 0o644))
}

// trainerStarted are the run log's lines that name the training process
// and its pid: the local backend's "started PROGRAM ARGS (pid N)", and an
// agent's "training process N started in DIR".
var trainerStarted = regexp.MustCompile(`(?m)\bstarted \S+ .*--spec \S+ \(pid (\d+)\)$|training process (\d+) started in `)

// TrainerPID is the pid of the run's training process as its run log
// names it, the last one when a job ran more than once; 0 before the log
// names one.
func (r *Runs) TrainerPID(id string) int {
	m := trainerStarted.FindAllStringSubmatch(r.File(id, "run.log"), -1)
	if m == nil {
		return 0
	}
	last := m[len(m)-1]
	pid, _ := strconv.Atoi(last[1] + last[2])
	return pid
}
