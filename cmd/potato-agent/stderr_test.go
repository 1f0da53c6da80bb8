package main

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stuckWriter is a standard error that nobody reads: every write blocks
// until the test lets it go.
type stuckWriter struct {
	mu      sync.Mutex
	release chan struct{}
	got     strings.Builder
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got.Write(p)
}

func (w *stuckWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got.String()
}

// A standard error that takes no writes (a link cut without a word)
// blocks none of the agent's writes; what did not fit is counted, and the
// count is written in its place once the stream takes writes again.
func TestStderrLogNeverBlocks(t *testing.T) {
	w := &stuckWriter{release: make(chan struct{})}
	l := newStderrLog(w)
	const n = logDepth + 50
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			fmt.Fprintf(l, "line %d\n", i)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("writes to a stream nobody reads blocked")
	}
	close(w.release)
	deadline := time.Now().Add(30 * time.Second)
	for len(l.queue) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprintf(l, "after\n")
	l.Close(30 * time.Second)
	got := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	// The first write may have been taken before the stream stuck: up to
	// logDepth+1 lines get through, in their order, and the rest are
	// counted.
	kept := 0
	for kept < len(got) && got[kept] == fmt.Sprintf("line %d", kept) {
		kept++
	}
	if kept < logDepth || kept > logDepth+1 {
		t.Fatalf("%d lines written in order, want %d or %d:\n%s", kept, logDepth, logDepth+1, strings.Join(got, "\n"))
	}
	want := []string{fmt.Sprintf("potato-agent: %d lines of this log were dropped: standard error was not being read", n-kept), "after"}
	if rest := got[kept:]; len(rest) != 2 || rest[0] != want[0] || rest[1] != want[1] {
		t.Errorf("after the lines kept: %q, want %q", rest, want)
	}
}

// Close waits for what is queued only as long as it is told.
func TestStderrLogCloseBound(t *testing.T) {
	w := &stuckWriter{release: make(chan struct{})}
	defer close(w.release)
	l := newStderrLog(w)
	fmt.Fprintf(l, "stuck\n")
	start := time.Now()
	l.Close(200 * time.Millisecond)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Close waited %s for a stuck stream, told 200 ms", waited)
	}
}

// failingWriter is a pipe whose reader is gone.
type failingWriter struct{ writes int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.writes++
	return 0, syscall.EPIPE
}

// A stream whose reader is gone fails a write once; the writer then drops
// what follows without trying, and its callers never see the error.
func TestStderrLogAfterEPIPE(t *testing.T) {
	w := &failingWriter{}
	l := newStderrLog(w)
	for i := range 10 {
		if n, err := fmt.Fprintf(l, "line %d\n", i); err != nil || n == 0 {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	l.Close(10 * time.Second)
	if w.writes != 1 {
		t.Errorf("%d writes to a stream that failed the first, want 1", w.writes)
	}
	if _, err := l.Write([]byte("after close\n")); err != nil {
		t.Errorf("a write after Close: %v", err)
	}
}
