package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"potato-training/internal/testproject"
	"potato-training/lib/agentproto"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
	"potato-training/lib/validate"
)

// Many agents wait in their long poll when a run appears: the run's
// dispatch is asked once, not once per waiting agent, and exactly one
// agent gets it. The dispatch is a fake on the run's socket that counts
// the claims it is asked.
func TestOneRunManyWaitingClaimsOneForward(t *testing.T) {
	t.Parallel()
	s, tok := agentServer(t, 2*time.Second)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.broker.run(ctx)

	const agents = 40
	var wg sync.WaitGroup
	codes := make(chan int, agents)
	for i := 0; i < agents; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"backend":"lab","host":"h%d","workdir":"/w","version":"1"}`, i)
			req, _ := http.NewRequest(http.MethodPost, ts.URL+agentPrefix+"/claim", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	testproject.WaitFor(t, "the claims to wait", func() bool {
		s.broker.mu.Lock()
		defer s.broker.mu.Unlock()
		return len(s.broker.wake) == 1
	})

	run, err := s.Root.Create(rundir.Record{Backend: "lab", BackendType: config.TypeAgent, Trainer: "x", State: rundir.StateBuilding})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	l, sock, err := agentproto.ListenUnix(run.Path(rundir.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	var handed atomic.Bool
	srv := agentproto.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		time.Sleep(50 * time.Millisecond) // a dispatch busy enough for the claims to overlap
		if !handed.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(agentproto.Claim{RunID: run.ID, RunToken: "t"})
	}))
	defer srv.Close()
	// As the agent backend does: queued once its socket listens.
	if err := run.Update(func(r *rundir.Record) { r.State, r.AgentSocket = rundir.StateQueued, sock }); err != nil {
		t.Fatal(err)
	}
	s.broker.kick <- struct{}{}

	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[http.StatusOK] != 1 || got[http.StatusNoContent] != agents-1 {
		t.Errorf("answers %v, want one 200 and %d 204", got, agents-1)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the dispatch was asked %d times for one run, want once", n)
	}
}

// A run is listed as queued before its dispatch listens, e.g. while it
// waits its turn (B6): the claim waiting meanwhile gets it once it
// listens, not after its long poll.
func TestClaimWaitsForTheRunToListen(t *testing.T) {
	t.Parallel()
	s, tok := agentServer(t, time.Minute)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.broker.run(ctx)

	run, err := s.Root.Create(rundir.Record{Backend: "lab", BackendType: config.TypeAgent, Trainer: "x", State: rundir.StateQueued})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	s.broker.kick <- struct{}{}
	code := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+agentPrefix+"/claim", strings.NewReader(`{"backend":"lab","host":"h","workdir":"/w","version":"1"}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			code <- 0
			return
		}
		resp.Body.Close()
		code <- resp.StatusCode
	}()
	testproject.WaitFor(t, "the claim to wait", func() bool {
		s.broker.mu.Lock()
		defer s.broker.mu.Unlock()
		return len(s.broker.wake) == 1
	})
	l, sock, err := agentproto.ListenUnix(run.Path(rundir.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Update(func(r *rundir.Record) { r.AgentSocket = sock }); err != nil {
		t.Fatal(err)
	}
	srv := agentproto.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(agentproto.Claim{RunID: run.ID, RunToken: "t"})
	}))
	defer srv.Close()
	if c := <-code; c != http.StatusOK {
		t.Errorf("the claim got %d, want the run (200) once its dispatch listens", c)
	}
}

// agentServer is a Server of a project whose backend "lab" is of type
// agent, and that backend's token.
func agentServer(t *testing.T, longPoll time.Duration) (*Server, string) {
	t.Helper()
	path, cfg, root, tok := agentProject(t, "")
	return &Server{ConfigPath: path, Config: cfg, Root: root, LongPoll: longPoll, Logf: t.Logf}, tok
}

// agentProject writes a project whose backend "lab" is of type agent, its
// model_training block ending with extra, and issues that backend's token.
func agentProject(t *testing.T, extra string) (path string, cfg *config.Config, root *rundir.Root, tok string) {
	t.Helper()
	path = testproject.Write(t, t.TempDir(), 20, 10, "  backend: lab\n  backends:\n    lab:\n      type: agent\n"+extra)
	cfg, report, err := validate.File(path)
	if err != nil || len(report.Errors) > 0 {
		t.Fatalf("config: %v %+v", err, report.Errors)
	}
	if root, err = rundir.Open(cfg.TrainingDir()); err != nil {
		t.Fatal(err)
	}
	if tok, err = root.IssueToken("lab", time.Now()); err != nil {
		t.Fatal(err)
	}
	return path, cfg, root, tok
}
