// What a job sends the server: its events, posted soon after each and at
// least every heartbeat, with a cancel in a reply; then its predictions
// and its result (finish), which a polling agent spools first.

package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/events"
)

// finish sends the job's predictions (pred, "" for none) and its result,
// and stops the posts. A polling agent spools them first and tries until
// the server acknowledges them or has been silent for Unreachable; they
// then stay in the spool, for Run to send later. An agent started over
// ssh makes one attempt.
func (s *state) finish(ctx context.Context, j *job, code int, uri, pred string, jobErr error) error {
	s.exit = code
	res := result(code, uri, jobErr)
	// An agent stopped by a signal still sends what its job owes, with one
	// bounded attempt.
	stopping := ctx.Err() != nil
	if stopping {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
		defer cancel()
	}
	if !s.o.Polling {
		if stopping && j.pending() > 0 {
			// The posts ended with the agent's context; the training
			// process's last events go before the result.
			j.post(ctx)
		}
		if pred != "" {
			if err := s.o.Client.UploadPredictions(ctx, j.claim.RunID, pred); err != nil {
				j.stopPosting()
				rcode := agentproto.CodeUploadFailed
				if errors.Is(err, agentproto.ErrTooLarge) {
					rcode = agentproto.CodeUploadRefused
				}
				return report(ctx, s.o, j.claim, code, uri, failf(rcode, "uploading the predictions: %w", err))
			}
		}
		j.stopPosting()
		if err := report(ctx, s.o, j.claim, code, uri, jobErr); err != nil {
			return err
		}
		return j.exitFailure(code)
	}
	it := &item{RunID: j.claim.RunID, Backend: s.o.Backend, RunToken: j.claim.RunToken,
		MaxPredictionsMB: j.claim.MaxPredictionsMB, Result: res}
	if j.fetched {
		it.BundleSHA256 = j.claim.Bundle.SHA256
	}
	if err := newItem(s.o.Workdir, it, pred); err != nil {
		s.o.logf("run %s: cannot spool its result (%v): sending it without a copy on disk", j.claim.RunID, err)
		it.dir = ""
	}
	// The watch (G9) ends jctx.
	jctx := j.ctxOr(ctx)
	if stopping {
		jctx = ctx
	}
	d := s.deliverer(it)
	d.beforeResult = func() bool {
		j.stopPosting()
		return j.pending() == 0
	}
	var bo backoff
	for {
		if j.pending() > 0 {
			j.post(jctx)
		}
		done, err := false, error(errPending)
		if j.pending() == 0 {
			done, err = d.step(jctx)
		}
		if done {
			switch {
			case it.Result.Error != "":
				return errors.New(it.Result.Error)
			case it.refused != "" && !j.cancelled():
				return errors.New(it.refused)
			}
			// A job the server cancelled stays cancelled when the server
			// then refuses its result: the run has ended there (its
			// dispatch does not wait past the grace for a result), and
			// the refusal is in the log.
			return j.exitFailure(code)
		}
		if err != nil && !errors.Is(err, errPending) {
			return fmt.Errorf("spooling the result: %w", err)
		}
		s.pendingFail(j.claim.RunID, "sending the result", err)
		if stopping || jctx.Err() != nil || s.silence() > s.o.Unreachable || !sleep(jctx, bo.next()) {
			break
		}
	}
	j.stopPosting()
	j.mu.Lock()
	evs, raw := j.queue, j.raw
	j.queue, j.raw = nil, nil
	j.mu.Unlock()
	if it.dir == "" {
		return fmt.Errorf("the result could not be sent: %s", res.Error)
	}
	if err := it.addEvents(evs, raw); err != nil {
		s.o.logf("run %s: spooling %d events: %v", j.claim.RunID, len(evs)+len(raw), err)
	}
	s.o.logf("run %s: the server has not answered for %s: the result is kept in %s and sent when it answers again",
		j.claim.RunID, s.silence().Round(time.Second), it.dir)
	return fmt.Errorf("the result is not sent yet (kept in %s)", it.dir)
}

// exitFailure is nil for a training process that exited 0, else why the
// job failed: its exit status and its last error event's message.
func (j *job) exitFailure(code int) error {
	if code == 0 {
		return nil
	}
	j.mu.Lock()
	msg, why := j.errMsg, j.whyCode
	j.mu.Unlock()
	if why == agentproto.CodeCancelled {
		return ErrCancelled
	}
	if msg != "" {
		return fmt.Errorf("the training process failed (exit status %d): %s", code, msg)
	}
	return fmt.Errorf("the training process failed (exit status %d)", code)
}

// cancelled reports whether the server asked for the job's cancel.
func (j *job) cancelled() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.whyCode == agentproto.CodeCancelled
}

// ctxOr is the job's context, ended by the watch, or ctx.
func (j *job) ctxOr(ctx context.Context) context.Context {
	if j.ctx != nil {
		return j.ctx
	}
	return ctx
}

func (j *job) pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.queue) + len(j.raw)
}

func report(ctx context.Context, o Options, claim *agentproto.Claim, code int, uri string, err error) error {
	res := result(code, uri, err)
	if perr := o.Client.PostResult(ctx, claim.RunID, res); perr != nil {
		return errors.Join(err, fmt.Errorf("reporting the result: %w", perr))
	}
	return err
}

func (j *job) emit(e events.Event) {
	defer func() {
		select {
		case j.queued <- struct{}{}:
		default:
		}
	}()
	j.mu.Lock()
	j.queue = append(j.queue, e)
	switch e.Kind {
	case events.KindResult:
		j.predictions = e.String("predictions_file")
	case events.KindError:
		j.errMsg = e.String("message")
	}
	j.mu.Unlock()
}

// startPosting sends queued events at least every heartbeat period and
// soon after each event, and applies a cancel from a reply; after a
// failed post it waits as Backoff says. stopPosting flushes what is left
// and stops it. An event is sent at once when the last post is a tick
// (250 ms) old, else on the next tick: the run's first event does not
// wait, and a chatty trainer still makes at most four posts a second.
func (j *job) startPosting(ctx context.Context) {
	j.ctx = ctx
	done := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		// gap is the least time between two posts of events; a little
		// under the tick, which may come a little early.
		const period, gap = 250 * time.Millisecond, 200 * time.Millisecond
		tick := time.NewTicker(period)
		defer tick.Stop()
		last, next := time.Time{}, time.Time{}
		var bo backoff
		send := func() {
			if j.post(ctx) {
				bo.reset()
				next = time.Time{}
			} else {
				next = time.Now().Add(bo.next())
			}
			last = time.Now()
		}
		for {
			select {
			case <-done:
				j.post(ctx)
				return
			case <-ctx.Done():
				return
			case <-j.queued:
				if time.Now().Before(next) || time.Since(last) < gap {
					continue // the next tick sends it
				}
				send()
			case <-tick.C:
				if time.Now().Before(next) {
					continue
				}
				if since := time.Since(last); j.pending() > 0 && since >= gap || since >= j.o.Heartbeat {
					send()
				}
			}
		}
	}()
	var once sync.Once
	j.stopPosts = func() {
		once.Do(func() {
			close(done)
			<-flushed
		})
	}
}

func (j *job) stopPosting() {
	if j.stopPosts != nil {
		j.stopPosts()
	}
}

// post sends what is queued, or a heartbeat; it reports whether the
// server answered.
func (j *job) post(ctx context.Context) bool {
	// One post at a time, so events reach the server in their order.
	j.postMu.Lock()
	defer j.postMu.Unlock()
	j.mu.Lock()
	evs, raw := j.queue, j.raw
	j.queue, j.raw = nil, nil
	j.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, postTimeout)
	reply, err := j.o.Client.PostEvents(pctx, j.claim.RunID, evs, raw)
	cancel()
	if err != nil {
		// Put them back; the next post retries.
		j.mu.Lock()
		j.queue = append(evs, j.queue...)
		j.raw = append(raw, j.raw...)
		j.mu.Unlock()
		j.a.out.fail("run "+j.claim.RunID, err)
		return false
	}
	j.a.heard()
	if reply.Cancel {
		g := j.grace
		if reply.GraceSeconds > 0 {
			g = time.Duration(reply.GraceSeconds) * time.Second
		}
		j.stop(agentproto.CodeCancelled, "cancel requested by the server", g)
	}
	return true
}
