package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// sigpipe receives the SIGPIPE of a write to a standard output or error
// that nobody reads any more, which is all it takes for Go to return the
// write's EPIPE instead of killing the program (os/signal, "SIGPIPE").
// Nothing reads the channel: a full one drops the signal, which changes
// nothing.
var sigpipe = make(chan os.Signal, 1)

// surviveClosedStreams keeps potato-agent alive when its standard output
// or error is a pipe whose reader is gone: the agent of an ssh or slurm
// backend, whose ssh session ended (a dropped link), still has to stop
// its training process or scancel its job, and writes its reason to
// standard error first; a polling agent under systemd outlives a restart
// of the journal; a worker whose agent is gone stops its fit (workerCmd).
//
// signal.Notify, not signal.Ignore: an ignored signal stays ignored in
// every program started from here (sbatch, squeue, scancel, the training
// process), which would then never die of a closed pipe of their own; a
// caught one is back to its default in them.
func surviveClosedStreams() { signal.Notify(sigpipe, syscall.SIGPIPE) }

// stderrLog is potato-agent's standard error: each write is handed to a
// goroutine of its own that writes it on, so that no write ever blocks
// the program or fails it. A stream that stops being read (the link of
// an ssh session cut without a word, whose sshd no longer takes what the
// agent writes) would otherwise stop the agent at a log line, while it
// holds its job's lock, before the training process is stopped or the
// job cancelled. At most logDepth writes wait; more are dropped and
// counted, and the count is written in their place once the stream takes
// writes again. Once the stream has failed a write (EPIPE: its reader is
// gone), what follows is dropped.
type stderrLog struct {
	w       io.Writer
	queue   chan []byte
	done    chan struct{}
	mu      sync.Mutex
	closed  bool
	dropped int
}

// logDepth is how many writes may wait for a slow standard error.
const logDepth = 256

// exitFlush bounds the wait at exit for what is still queued.
const exitFlush = 5 * time.Second

func newStderrLog(w io.Writer) *stderrLog {
	l := &stderrLog{w: w, queue: make(chan []byte, logDepth), done: make(chan struct{})}
	go l.run()
	return l
}

// Write queues a copy of p; it never blocks and never fails. After
// writes were dropped, the next one that fits goes after a line that
// counts them, in their place.
func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !l.noteDropped(2) {
		l.dropped++
		return len(p), nil
	}
	select {
	case l.queue <- append([]byte(nil), p...):
	default:
		l.dropped++
	}
	return len(p), nil
}

// noteDropped queues the count of the dropped writes, if any, when room
// is left for it and need-1 more; it reports whether that was done. Only
// Write and Close queue, under l.mu, so the room cannot shrink meanwhile.
func (l *stderrLog) noteDropped(need int) bool {
	if l.dropped == 0 {
		return true
	}
	if cap(l.queue)-len(l.queue) < need {
		return false
	}
	l.queue <- fmt.Appendf(nil, "potato-agent: %d lines of this log were dropped: standard error was not being read\n", l.dropped)
	l.dropped = 0
	return true
}

func (l *stderrLog) run() {
	defer close(l.done)
	dead := false
	for b := range l.queue {
		if !dead {
			_, err := l.w.Write(b)
			dead = err != nil
		}
	}
}

// Close writes on what is queued, waiting at most bound for a stream
// that does not take it; later writes are dropped.
func (l *stderrLog) Close(bound time.Duration) {
	l.mu.Lock()
	if !l.closed {
		l.noteDropped(1)
		l.closed = true
		close(l.queue)
	}
	l.mu.Unlock()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
	}
}
