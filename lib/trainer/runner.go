package trainer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"potato-training/lib/events"
)

// Process is a training process started in its own process group, so that
// a cancel reaches everything it started.
type Process struct {
	cmd     *exec.Cmd
	pipe    *os.File // the read end of standard output
	stdout  io.Reader
	raw     io.Writer // non-event lines, or nil
	done    chan struct{}
	exited  chan struct{}
	waitErr error

	mu       sync.Mutex
	killTime *time.Timer
	termSent bool
}

// Command describes how to start a training process.
type Command struct {
	Path string
	Args []string // without the program name
	Dir  string
	Env  []string // the whole environment
	// Stderr receives the process's standard error (stderr.log).
	Stderr io.Writer
	// RawStdout, when set, receives the lines of standard output that are
	// not v1 events (stdout.log): the process's own prints, which events
	// do not carry. The events go to onEvent alone (events.jsonl).
	RawStdout io.Writer
}

// Start starts c in a new process group.
func Start(c Command) (*Process, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = c.Env
	cmd.Stderr = c.Stderr
	// Its own group, so a cancel reaches what it starts; and killed with
	// its parent, so a dispatch killed outright leaves no training
	// process holding the machine after the queue is free.
	cmd.SysProcAttr = groupAttr()
	// Our own pipe rather than StdoutPipe: the process is reaped when it
	// exits, not when every holder of its standard output has closed it
	// (a daemon it left behind may never do).
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	p := &Process{cmd: cmd, pipe: r, stdout: r, raw: c.RawStdout, done: make(chan struct{}), exited: make(chan struct{})}
	go p.reap()
	return p, nil
}

// drainTime is how long standard output is still read once the process
// has exited, for what it wrote last.
var drainTime = 2 * time.Second

// reap waits for the process, then ends what is left of its group: the
// group is the run's, and a survivor (a worker that ignores SIGTERM, a
// daemon) must not hold the machine once the queue is free.
func (p *Process) reap() {
	p.waitErr = p.cmd.Wait()
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	p.mu.Lock()
	if p.killTime != nil {
		p.killTime.Stop()
	}
	p.mu.Unlock()
	_ = p.pipe.SetReadDeadline(time.Now().Add(drainTime))
	close(p.exited)
}

// PID is the process's id, also its process group's.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Relay reads standard output until it closes, calling onEvent for each v1
// event and onLine for any other line (kept as log, never fatal; also
// written to RawStdout). Then it waits for the process to exit.
func (p *Process) Relay(onEvent func(events.Event), onLine func(string)) {
	r := bufio.NewReaderSize(p.stdout, 64<<10)
	var long bytes.Buffer
	for {
		chunk, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if long.Len() < events.MaxLine {
				long.Write(chunk)
			}
			continue
		}
		line := chunk
		if long.Len() > 0 {
			long.Write(chunk)
			line = long.Bytes()
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if e, perr := events.Parse(line); perr == nil {
				onEvent(e)
			} else {
				text := bytes.TrimRight(line, "\r\n")
				if p.raw != nil {
					_, _ = p.raw.Write(append(slices.Clip(text), '\n'))
				}
				onLine(string(text))
			}
		}
		long.Reset()
		if err != nil {
			break
		}
	}
	<-p.exited
	p.pipe.Close()
	close(p.done)
}

// Done is closed once the process has exited and its output is read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Terminate sends SIGTERM to the process group and SIGKILL after grace,
// unless the process has exited by then. A second call does nothing.
func (p *Process) Terminate(grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return // reaped: its group has been killed already
	default:
	}
	if p.termSent {
		return
	}
	p.termSent = true
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	p.killTime = time.AfterFunc(grace, p.Kill)
}

// Kill sends SIGKILL to the process group.
func (p *Process) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
}

// Exit describes how the process ended, once Done is closed.
type Exit struct {
	Code   int            // exit status, -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it, 0 when it exited
}

func (e Exit) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("killed by %s", signalName(e.Signal))
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	}
	return s.String()
}

// Exit returns how the process ended; call it after Done.
func (p *Process) Exit() Exit {
	st := p.cmd.ProcessState
	if st == nil {
		return Exit{Code: -1}
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: st.ExitCode()}
}

// Environ returns the environment of a training process: this process's
// own with the variables of extra (LaunchEnv's: device and threads, SPEC
// L3, S4) set over it.
func Environ(extra ...string) []string {
	env := os.Environ()
	set := map[string]string{}
	for _, kv := range extra {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set[k] = v
		}
	}
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, over := set[name]; !over {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, k+"="+set[k])
	}
	return out
}
