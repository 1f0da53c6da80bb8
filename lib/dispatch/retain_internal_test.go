package dispatch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"potato-training/lib/rundir"
)

// runsOf makes a listing, oldest first, from specs "ID STATE TRAINER
// SCHEMA[,SCHEMA]"; a state written "queued" is a run not finished,
// "pending" an error waiting for write-back.
func runsOf(specs ...string) []rundir.Info {
	var out []rundir.Info
	t0 := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	for i, s := range specs {
		f := strings.Fields(s)
		info := rundir.Info{Record: rundir.Record{RunID: f[0], State: f[1], Trainer: f[2], Schemas: strings.Split(f[3], ","),
			CreatedAt: t0.Add(time.Duration(i) * time.Minute)}, Finished: true}
		switch f[1] {
		case "queued":
			info.Finished = false
		case "pending":
			info.State, info.WritebackPending = rundir.StateError, true
		}
		out = append(out, info)
	}
	return out
}

func ids(runs []rundir.Info) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.RunID)
	}
	return out
}

func TestChoosePrune(t *testing.T) {
	cases := []struct {
		name    string
		runs    []rundir.Info
		keep    int
		cited   []string
		current string
		remove  []string
		kept    []string // "id: reason", oldest last
	}{
		{
			// Failed runs do not push good ones out: the two successes
			// stay, and the oldest failure goes.
			name: "failures after successes",
			runs: runsOf("s1 success tfidf a", "s2 success tfidf a", "f1 error exec a", "f2 error exec a", "f3 cancelled exec a"),
			keep: 2, current: "f3", remove: []string{"f1"},
		},
		{
			name: "successes beyond the window",
			runs: runsOf("s1 success tfidf a", "s2 success tfidf a", "s3 success tfidf a", "s4 success tfidf a", "s5 success tfidf a"),
			keep: 2, cited: []string{"s2"}, current: "s5", remove: []string{"s3", "s1"},
			kept: []string{"s2: " + keepCited},
		},
		{
			// The newest success of each trainer and schema stays however
			// old it is; a run that trained two schemas stays while it is
			// the newest of one of them.
			name: "newest of each trainer and schema",
			runs: runsOf("old success hf a", "both success tfidf a,b", "s1 success tfidf a", "s2 success tfidf a", "s3 success tfidf a"),
			keep: 2, remove: []string{"s1"},
			kept: []string{"both: the newest successful run of trainer tfidf for schema b", "old: the newest successful run of trainer hf for schema a"},
		},
		{
			// A run not finished is never removed and does not count; a run
			// waiting for write-back stays.
			name: "unfinished and pending",
			runs: runsOf("q1 queued tfidf a", "p1 pending tfidf a", "f1 error exec a", "f2 error exec a", "f3 error exec a", "q2 queued tfidf a"),
			keep: 2, remove: []string{"f1"},
			kept: []string{"p1: " + keepPending},
		},
		{
			name: "retain_runs 0 keeps all",
			runs: runsOf("f1 error exec a", "f2 error exec a", "f3 error exec a"),
			keep: 0,
		},
		{
			// The ending run has no exit_code yet: it counts as finished.
			name: "the ending run counts",
			runs: func() []rundir.Info {
				r := runsOf("f1 error exec a", "f2 error exec a")
				r[1].Finished = false
				return r
			}(),
			keep: 1, current: "f2", remove: []string{"f1"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cited := map[string]bool{}
			for _, id := range c.cited {
				cited[id] = true
			}
			got := choosePrune(c.runs, c.keep, cited, c.current)
			if !slices.Equal(ids(got.remove), c.remove) {
				t.Errorf("removed %q, want %q", ids(got.remove), c.remove)
			}
			var kept []string
			for _, k := range got.kept {
				kept = append(kept, k.id+": "+k.why)
			}
			if !slices.Equal(kept, c.kept) {
				t.Errorf("kept\n %q\nwant\n %q", kept, c.kept)
			}
		})
	}
}

// newestSuccess is Potato's latest model: the newest success whose
// schemas hold the schema; a model left on a backend's host is skipped
// for the latest/ link only.
func TestNewestSuccess(t *testing.T) {
	runs := runsOf("s1 success tfidf a", "s2 success hf a,b", "s3 success tfidf b", "f1 error tfidf a", "q1 queued tfidf a")
	runs[2].ArtifactURI = "ssh://gpu/srv/potato/runs/s3/artifacts"
	runs[4].State = rundir.StateSuccess // a record that says success, without exit_code
	for _, c := range []struct {
		schema, trainer string
		local           bool
		want            string
	}{
		{"a", "", false, "s2"}, {"a", "tfidf", false, "s1"}, {"b", "", false, "s3"}, {"b", "", true, "s2"},
		{"", "", false, "s3"}, {"c", "", false, ""}, {"a", "nosuch", false, ""},
	} {
		got := ""
		if r := newestSuccess(runs, c.schema, c.trainer, c.local); r != nil {
			got = r.RunID
		}
		if got != c.want {
			t.Errorf("newestSuccess(%q, %q, local %v) = %q, want %q", c.schema, c.trainer, c.local, got, c.want)
		}
	}
}
