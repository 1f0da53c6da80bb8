package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"potato-training/internal/cli"
	"potato-training/lib/agent"
	"potato-training/lib/trainer"
)

// Each typed error of lib/agent and lib/trainer gets its exit status and
// its message, or none.
func TestExitError(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
		msg  string
	}{
		{nil, cli.ExitOK, ""},
		{context.Canceled, cli.ExitOK, ""},
		{fmt.Errorf("claim: %w", context.Canceled), cli.ExitOK, ""},
		{&agent.UsageError{Err: errors.New("give --server URL (or --socket PATH)")}, cli.ExitUsage, "give --server URL (or --socket PATH)"},
		{&trainer.WorkerError{Exit: 2, Code: "bad_spec", Msg: "bad"}, 2, "bad"},
		{&trainer.WorkerError{Exit: 4, Code: "cancelled"}, 4, ""},
		{&agent.ExecFailed{Err: errors.New("exec: /x: permission denied")}, 126, "exec: /x: permission denied"},
		{&agent.JobError{RunID: "r", Err: errors.New("the training process failed (exit status 2)")}, cli.ExitNo, "run r: the training process failed (exit status 2)"},
		{&agent.JobError{RunID: "r", Err: agent.ErrCancelled, Cancelled: true}, ExitCancelled, ""},
	} {
		err := exitError(c.err)
		if c.code == cli.ExitOK {
			if err != nil {
				t.Errorf("%v: %v, want nil", c.err, err)
			}
			continue
		}
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != c.code || (ee.Err == nil) != (c.msg == "") || ee.Err != nil && ee.Err.Error() != c.msg {
			t.Errorf("%v: %#v, want exit %d and %q", c.err, err, c.code, c.msg)
		}
	}
}
