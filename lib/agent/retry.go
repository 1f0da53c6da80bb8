package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"potato-training/lib/agentproto"
)

// Backoff of a polling agent's requests: waits drawn at random from 0 to
// a ceiling that starts at BackoffFirst and doubles to BackoffMax ("full
// jitter"), so agents that lost the same server do not come back in step.
const (
	BackoffFirst = 500 * time.Millisecond
	BackoffMax   = 30 * time.Second
)

// Time limits of single requests: a server that accepts a connection and
// then says nothing must not hold the agent.
const (
	// claimTimeout covers a claim's long poll (25 s) and a slow link.
	claimTimeout = 60 * time.Second
	// postTimeout bounds a POST of events or a result.
	postTimeout = 30 * time.Second
)

// uploadTimeout bounds one upload of size bytes: two minutes, and one
// second more for each 256 KiB (a link of at least 256 KiB/s).
func uploadTimeout(size int64) time.Duration {
	return 2*time.Minute + time.Duration(size>>18)*time.Second
}

type backoff struct {
	n int
}

// next is the wait before the next attempt.
func (b *backoff) next() time.Duration {
	ceil := BackoffFirst << min(b.n, 10)
	if ceil > BackoffMax || ceil <= 0 {
		ceil = BackoffMax
	}
	b.n++
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

func (b *backoff) reset() { b.n = 0 }

// sleep waits d, or less when ctx ends; it reports whether ctx is alive.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryable reports whether another attempt may succeed: the server was
// not reached (or the attempt was cut short), or it answered 5xx, 408,
// 425 or 429. Any other answer is final.
func retryable(err error) bool {
	var he *agentproto.HTTPError
	if errors.As(err, &he) {
		switch {
		case he.Code >= 500,
			he.Code == http.StatusRequestTimeout,
			he.Code == http.StatusTooEarly,
			he.Code == http.StatusTooManyRequests:
			return true
		}
		return false
	}
	return err != nil
}

// httpCode is the status of a server's answer, 0 when there was none.
func httpCode(err error) int {
	var he *agentproto.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return 0
}

// outage logs a lost server once, when it is first noticed, and once
// when it answers again, however many attempts fail in between.
type outage struct {
	o     *Options
	mu    sync.Mutex
	since time.Time
}

// fail records a failed request; only the first of an outage is logged.
func (u *outage) fail(what string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.since.IsZero() {
		u.since = time.Now()
		u.o.logf("%s: %v; trying again until the server answers", what, err)
	}
}

// ok records an answer from the server.
func (u *outage) ok() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.since.IsZero() {
		u.o.logf("the server answers again, after %s", time.Since(u.since).Round(100*time.Millisecond))
		u.since = time.Time{}
	}
}
