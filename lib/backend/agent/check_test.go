package agent_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	agentbackend "potato-training/lib/backend/agent"
	"potato-training/lib/check"
	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

func agentConfig(t *testing.T, extra string) (*config.Config, *config.Backend, *rundir.Root) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.ParseConfig([]byte("model_training:\n  backends:\n    lab: {type: agent"+extra+"}\n"), dir)
	cfg.Path = "config.yaml"
	if len(cfg.Problems) > 0 {
		t.Fatalf("config: %v", cfg.Problems)
	}
	b, ok := cfg.Backend("lab")
	if !ok {
		t.Fatal("no backend lab")
	}
	root, err := rundir.Open(cfg.TrainingDir())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, b, root
}

func text(t *testing.T, r check.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := check.WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestAgentNoToken(t *testing.T) {
	cfg, b, _ := agentConfig(t, "")
	r := agentbackend.Check(cfg, b, time.Now(), hfJudged)
	want := "lab (agent): no token issued yet\n" +
		"  trainer: hf-text-classification (the first trainer that uses a GPU)\n" +
		"  tfidf-logreg: cannot start: no token issued yet\n" +
		"  hf-text-classification: cannot start: no token issued yet\n" +
		"  embed-logreg: cannot start: no token issued yet\n" +
		"  hf-span: cannot start: no token issued yet\n" +
		"  hf-llm-classification: cannot start: no token issued yet\n" +
		"  decision-calibrate: cannot start: it runs only on the annotation server: it reads the annotation server's own files (Potato's store, project.sqlite, and the annotations)\n" +
		"  hint: issue one with: potato training register lab config.yaml\n"
	if got := text(t, r); r.OK || got != want {
		t.Errorf("ok %v, text:\n%s\nwant:\n%s", r.OK, got, want)
	}
	if r.TokenIssuedAt != nil || r.LastSeen != nil {
		t.Errorf("times in a report without a token: %+v", r)
	}
}

func TestAgentLastSeen(t *testing.T) {
	cfg, b, root := agentConfig(t, ", heartbeat_timeout_s: 60")
	issued := time.Date(2026, 12, 2, 13, 55, 1, 0, time.UTC)
	if _, err := root.IssueToken("lab", issued); err != nil {
		t.Fatal(err)
	}

	// Registered, never seen: a run would wait, so the answer is no.
	r := agentbackend.Check(cfg, b, issued.Add(time.Minute), hfJudged)
	got := text(t, r)
	if r.OK || r.TokenIssuedAt == nil || !r.TokenIssuedAt.Equal(issued) || r.LastSeen != nil {
		t.Errorf("never seen: %+v", r)
	}
	for _, line := range []string{
		"lab (agent): no agent has connected yet, so a run would wait in the queue\n",
		"  token: issued 2026-12-02T13:55:01Z\n",
		"  last_seen: never (no agent has connected yet)\n",
		"  hint: start the agent on the training machine: potato training agent --server URL --backend lab",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("never seen: no %q in\n%s", line, got)
		}
	}

	// Seen 30 s ago, within heartbeat_timeout_s: polling, yes.
	seen := issued.Add(time.Hour)
	if err := root.AgentSeen("lab", "ws-01", seen); err != nil {
		t.Fatal(err)
	}
	r = agentbackend.Check(cfg, b, seen.Add(30*time.Second), hfJudged)
	got = text(t, r)
	if !r.OK || !r.AgentPolling || r.LastHost != "ws-01" || r.LastSeenAgoS == nil || *r.LastSeenAgoS != 30 {
		t.Errorf("polling: %+v", r)
	}
	for _, line := range []string{
		"lab (agent): an agent on ws-01 is polling for work\n",
		"  last_seen: 2026-12-02T14:55:01Z on ws-01 (30 s ago)\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("polling: no %q in\n%s", line, got)
		}
	}

	// Seen 3 hours ago: no agent polls now (F10).
	r = agentbackend.Check(cfg, b, seen.Add(3*time.Hour), hfJudged)
	got = text(t, r)
	if r.OK || r.AgentPolling {
		t.Errorf("stale: %+v", r)
	}
	if !strings.HasPrefix(got, "lab (agent): no agent has polled for 3 h, so a run would wait in the queue\n") ||
		!strings.Contains(got, "  last_seen: 2026-12-02T14:55:01Z on ws-01 (3 h ago)\n") {
		t.Errorf("stale:\n%s", got)
	}

	// An agent busy with a run of this backend does not poll, but a run
	// can start after it.
	run, err := root.Create(rundir.Record{Backend: "lab", BackendType: "agent", State: rundir.StateRunning})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	r = agentbackend.Check(cfg, b, seen.Add(3*time.Hour), hfJudged)
	if !r.OK || r.AgentRun != run.ID || !strings.HasPrefix(r.Summary, "lab (agent): an agent is training run "+run.ID) {
		t.Errorf("busy: %+v", r)
	}

	// Registering again replaces the record: last_seen is gone with the old
	// token.
	if _, err := root.IssueToken("lab", seen.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	run.Close()
	r = agentbackend.Check(cfg, b, seen.Add(4*time.Hour), hfJudged)
	if r.OK || r.LastSeen != nil || !strings.Contains(text(t, r), "last_seen: never") {
		t.Errorf("re-registered: %+v", r)
	}
}

var hfJudged = check.Judged{Name: "hf-text-classification", From: check.FromFirstGPU}

// An agent polling: every trainer but the local-only one can start, on
// the agent's machine, whose packages the check cannot see.
func TestAgentVerdicts(t *testing.T) {
	dir := t.TempDir()
	cfg := config.ParseConfig([]byte("model_training:\n  backends:\n    lab: {type: agent}\n"), dir)
	b, _ := cfg.Backend("lab")
	root, err := rundir.Open(cfg.TrainingDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.IssueToken("lab", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := root.AgentSeen("lab", "ws-01", time.Now()); err != nil {
		t.Fatal(err)
	}
	r := agentbackend.Check(cfg, b, time.Now(), hfJudged)
	if !r.OK || r.Trainer != "hf-text-classification" || len(r.Trainers) != 6 {
		t.Fatalf("%+v", r)
	}
	want := []check.Verdict{
		{Trainer: "tfidf-logreg", OK: true, Device: "the CPU of the agent's machine"},
		{Trainer: "hf-text-classification", OK: true, Device: "the agent's machine", Note: "its packages on the agent's machine cannot be seen from here"},
		{Trainer: "embed-logreg", OK: true, Device: "the agent's machine", Note: "its packages on the agent's machine cannot be seen from here"},
		{Trainer: "hf-span", OK: true, Device: "the agent's machine", Note: "its packages on the agent's machine cannot be seen from here"},
		{Trainer: "hf-llm-classification", OK: true, Device: "the agent's machine", Note: "its packages on the agent's machine cannot be seen from here"},
		{Trainer: "decision-calibrate", Reason: r.Trainers[len(r.Trainers)-1].Reason},
	}
	for i, v := range want {
		if r.Trainers[i] != v {
			t.Errorf("verdict %d: %+v, want %+v", i, r.Trainers[i], v)
		}
	}
	if !strings.HasPrefix(r.Trainers[len(r.Trainers)-1].Reason, "it runs only on the annotation server") {
		t.Errorf("decision-calibrate: %q", r.Trainers[len(r.Trainers)-1].Reason)
	}
	r = agentbackend.Check(cfg, b, time.Now(), check.Judged{Name: "decision-calibrate", From: check.FromFlag})
	if r.OK || !strings.HasPrefix(r.Summary, "lab (agent): decision-calibrate cannot start: it runs only on the annotation server") {
		t.Errorf("decision-calibrate judged: %+v", r)
	}
}
