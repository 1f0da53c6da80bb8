// The copy of the model back (Collect): the stall timeout, the attempts
// after a dropped link and the new connection each makes.

package ssh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"potato-training/lib/backend"
	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
	"potato-training/lib/shell"
	"potato-training/lib/sshx"
)

// StallTimeout is how long the copy of the model may send nothing; the
// environment variable POTATO_TRAINING_STALL_TIMEOUT_S overrides it (tests).
var StallTimeout = 180 * time.Second

// pathPrefix exports the env's PATH, the one variable of it that the
// copy back uses: a path, not a secret, on the command lines of ssh and
// rsync.
func pathPrefix(b *config.Backend) string {
	if p, ok := b.Env["PATH"]; ok {
		return "export PATH=" + shell.Quote(p) + "; "
	}
	return ""
}

// Collect copies the model back (SPEC S8) and removes the remote job
// directory after a complete copy. A stalled copy keeps the predictions,
// which the agent uploaded already, and leaves the model on the host (F7).
func (s *execution) Collect(ctx context.Context, _ events.Result) (backend.Collected, error) {
	defer s.closeSession()
	res := s.agent.Reported()
	remoteArtifacts := s.jobPath + "/artifacts" // sshx quotes it
	uri := ""
	if res != nil && res.ArtifactURI != "" {
		uri = res.ArtifactURI
	}
	keep := s.b.KeepRemote
	if !s.b.FetchArtifacts {
		s.keepJob = true
		s.run.Sink.Logf("fetch_artifacts is false: the model stays on %s (%s)", s.b.Host, uri)
		return backend.Collected{ArtifactURI: uri}, nil
	}
	large, err := s.conn.ListLarge(ctx, remoteArtifacts, s.b.MaxArtifactMB)
	if err != nil {
		s.run.Sink.Logf("warning: listing the model files on %s: %v", s.b.Host, err)
	}
	for _, f := range large {
		s.run.Sink.Logf("%s is over max_artifact_mb (%d MB): it stays on %s in %s", f, s.b.MaxArtifactMB, s.b.Host, uri)
	}
	var collected backend.Collected
	if len(large) > 0 {
		keep = true
		collected.ArtifactURI = uri
	}
	step := fmt.Sprintf(stepFetch, s.b.Host)
	s.run.Sink.Step(step)
	stall := StallTimeout
	if v, err := strconv.Atoi(os.Getenv("POTATO_TRAINING_STALL_TIMEOUT_S")); err == nil && v > 0 {
		stall = time.Duration(v) * time.Second
	}
	last := time.Time{}
	var done, total int64
	// The agent that ran the job writes the files as a tar stream on the
	// connection; a copy into artifacts/ that finds the part of a cut one
	// resumes it by rsync, where both ends have it. Of the backend's env
	// only PATH applies to the remote side, to find rsync: the others'
	// values would be on command lines (pathPrefix).
	fetch := func() error {
		return s.conn.Fetch(ctx, s.codeDir+"/potato-agent", remoteArtifacts, s.run.Dir.Path(rundir.ArtifactsDir), sshx.FetchOptions{
			Prefix:       pathPrefix(s.b) + testFetchWrapper(),
			MaxSizeMB:    s.b.MaxArtifactMB,
			MaxTotalMB:   s.b.MaxFetchMB,
			StallTimeout: stall,
			Rsync:        testRsync(),
			Using: func(method string) {
				s.run.Sink.Logf("copying the model from %s by %s", s.b.Host, method)
			},
			Progress: func(d, t int64) {
				done, total = d, t
				if time.Since(last) < 250*time.Millisecond && d < t {
					return
				}
				last = time.Now()
				s.run.Sink.Step(fmt.Sprintf("%s: %s of %s", step, mb(d), mb(t)))
				s.run.Sink.Progress("fetch", float64(d), float64(t))
			},
		})
	}
	err = fetch()
	// A copy cut by a dropped link is tried again on a new connection,
	// which resumes it from the part kept; the last attempt's error
	// decides the run's end. A failed login counts as an attempt.
	for attempt := 2; attempt <= fetchAttempts && s.brokeOff(err) && ctx.Err() == nil; attempt++ {
		s.run.Sink.Logf("the copy from %s broke off at %d of %d MB (%v): trying again in %d s, attempt %d of %d",
			s.b.Host, (done+(1<<19))>>20, (total+(1<<19))>>20, err, int(fetchRetryWait/time.Second), attempt, fetchAttempts)
		select {
		case <-time.After(fetchRetryWait):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if derr := s.redial(ctx); derr != nil {
			s.run.Sink.Logf("warning: connecting to %s again: %v", s.b.Host, derr)
			continue
		}
		err = fetch()
	}
	var stallErr *sshx.StallError
	switch {
	case errors.As(err, &stallErr):
		s.stalled = true
		s.run.Sink.Logf("%v: the run's predictions are already kept; only the model files are missing from artifacts/ (they stay on %s)", err, s.b.Host)
		collected.ArtifactURI = uri
		keep = true
	case err != nil:
		return collected, fmt.Errorf("copying the model from %s: %w", s.b.Host, err)
	}
	if keep {
		s.keepJob = true
		s.run.Sink.Logf("the job directory stays on %s: %s", s.b.Host, uri)
	}
	return collected, nil
}

// The copy back's attempts after a dropped link: how many in all, the
// wait before each new one and the bound of its login.
const (
	fetchAttempts  = 3
	fetchRetryWait = 5 * time.Second
	redialTimeout  = 20 * time.Second
)

// brokeOff says whether a copy back failed with the link: it stalled, ssh
// itself failed (exit status 255) or the master died.
func (s *execution) brokeOff(err error) bool {
	if err == nil {
		return false
	}
	var stallErr *sshx.StallError
	var connErr *sshx.ConnError
	return errors.As(err, &stallErr) || errors.As(err, &connErr) || s.conn.Err() != nil
}

// redial replaces the connection with a new one, its login bounded by
// redialTimeout; the old one is closed once the new one is up, and kept
// when the login fails.
func (s *execution) redial(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, redialTimeout)
	defer cancel()
	conn, err := sshx.Dial(dctx, sshx.TargetOf(s.b), "")
	if err != nil {
		return err
	}
	old := s.conn
	s.conn = conn
	_ = old.Close()
	return nil
}

func mb(n int64) string {
	return fmt.Sprintf("%d MB", (n+(1<<19))>>20)
}
