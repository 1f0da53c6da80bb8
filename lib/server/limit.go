package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Failed sign-ins, per client address: the page's form and wrong
// X-API-Key headers both guess admin_api_key, so both count. A key is
// compared only once its attempt is counted: an attempt takes a place
// (begin) before the comparison and gives it back with the outcome (end),
// and at most maxFailures attempts of a client are under way or failed,
// so that guesses sent at once, or staged on many connections, are
// judged one place at a time and never outnumber the bound. The answer
// to a failure is delayed, longer each time; after maxFailures failures
// within failureWindow, the client is refused for lockout (429 with
// Retry-After), whatever key it sends, and its key is not compared. A
// sign-in that succeeds forgets the client's failures. The table holds at
// most maxClients clients.
const (
	maxFailures   = 5
	failureWindow = 15 * time.Minute
	lockout       = 15 * time.Minute
	// firstDelay delays the first failure; each next one waits twice as
	// long (0.5 s, 1 s, 2 s, 4 s).
	firstDelay = 500 * time.Millisecond
	maxClients = 4096
)

// msgLockedOut is the refusal of a client locked out; %s is how long.
const msgLockedOut = "too many failed sign-ins from your address: try again in %s"

// limiter counts failed sign-ins per client.
type limiter struct {
	mu sync.Mutex
	// ended is signalled when an attempt ends: one waiting for a place
	// looks again.
	ended   *sync.Cond
	clients map[string]*failures
	// max bounds clients (maxClients when 0).
	max int
	// now and sleep are the clock; tests set their own.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration)
}

// failures are a client's failed sign-ins since its last success, and
// its attempts under way.
type failures struct {
	n       int
	pending int
	last    time.Time
	until   time.Time // locked out until then
}

func newLimiter() *limiter {
	l := &limiter{clients: map[string]*failures{}, now: time.Now, sleep: sleepCtx}
	l.ended = sync.NewCond(&l.mu)
	return l
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// lockedOut returns how long the client is still refused, or 0.
func (l *limiter) lockedOut(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.clients[client]
	if f == nil {
		return 0
	}
	now := l.now()
	if left := f.until.Sub(now); left > 0 {
		return left
	}
	return 0
}

// begin counts an attempt of the client before its key is compared. It
// returns how long the client is still locked out, or 0: then the key may
// be compared, and end must follow at once with the outcome. While
// maxFailures attempts are under way or failed it waits for one to end.
func (l *limiter) begin(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		now := l.now()
		f := l.clients[client]
		if f == nil {
			l.makeRoom(now)
			f = &failures{}
			l.clients[client] = f
		}
		if left := f.until.Sub(now); left > 0 {
			return left
		}
		if now.Sub(f.last) > failureWindow || !f.until.IsZero() {
			// Old failures, or a lockout served: start again.
			f.n, f.last, f.until = 0, time.Time{}, time.Time{}
		}
		if f.n+f.pending < maxFailures {
			f.pending++
			return 0
		}
		l.ended.Wait()
	}
}

// end gives back the place of an attempt begun. A success forgets the
// client's failures; a failure is counted, and end returns how long to
// delay its answer, or, when this failure locks the client out, 0 and
// true.
func (l *limiter) end(client string, ok bool) (delay time.Duration, locked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.ended.Broadcast()
	now := l.now()
	f := l.clients[client]
	if f != nil && f.pending > 0 {
		f.pending--
	}
	if ok {
		if f != nil {
			f.n, f.until = 0, time.Time{}
			if f.pending == 0 {
				delete(l.clients, client)
			}
		}
		return 0, false
	}
	if f == nil {
		// Dropped from a full table meanwhile.
		l.makeRoom(now)
		f = &failures{}
		l.clients[client] = f
	}
	f.n++
	f.last = now
	if f.n >= maxFailures {
		f.until = now.Add(lockout)
		return 0, true
	}
	return firstDelay << (f.n - 1), false
}

// failed counts a failed attempt of the client, begun and ended at once.
func (l *limiter) failed(client string) (delay time.Duration, locked bool) {
	if l.begin(client) > 0 {
		return 0, true
	}
	return l.end(client, false)
}

// makeRoom drops the clients whose failures are forgotten, and when the
// table is still full the one that failed longest ago, a client locked
// out last, so that one more fits. Called with mu held.
func (l *limiter) makeRoom(now time.Time) {
	limit := l.max
	if limit <= 0 {
		limit = maxClients
	}
	if len(l.clients) < limit {
		return
	}
	for c, f := range l.clients {
		if f.pending == 0 && now.Sub(f.last) > failureWindow && !now.Before(f.until) {
			delete(l.clients, c)
		}
	}
	// first tells whether f goes before g: not locked out before locked
	// out, then the older failure first.
	first := func(f, g *failures) bool {
		if fl, gl := now.Before(f.until), now.Before(g.until); fl != gl {
			return !fl
		}
		return f.last.Before(g.last)
	}
	for len(l.clients) >= limit {
		var drop string
		var d *failures
		for c, f := range l.clients {
			if d == nil || first(f, d) {
				drop, d = c, f
			}
		}
		delete(l.clients, drop)
	}
}

// retryAfter sets Retry-After to d in whole seconds, rounded up.
func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
}

// waitText says d as the refusal does: "15 min", "40 s".
func waitText(d time.Duration) string {
	if d >= time.Minute {
		return fmt.Sprintf("%d min", int((d+time.Minute-1)/time.Minute))
	}
	return fmt.Sprintf("%d s", max(1, int((d+time.Second-1)/time.Second)))
}

// clientAddr is who a request comes from, for counting failures: the
// peer's address, or the address X-Forwarded-For holds, which withProxies
// leaves only on a request of a trusted proxy, made the one address that
// proxy saw; as addrKey writes it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if fwd := net.ParseIP(r.Header.Get("X-Forwarded-For")); fwd != nil {
		ip = fwd
	}
	if ip == nil {
		return host
	}
	return addrKey(ip)
}

// addrKey is the address a client counts as, in the failed sign-ins and
// in the connections each address may hold: an IPv4 address (an
// IPv4-mapped IPv6 address written as IPv4), or the /64 of an IPv6
// address, since one host is given a /64 and can fill it with addresses.
func addrKey(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// signInFailed logs a wrong key from the request's client, whose attempt
// ended with delay and locked, and delays the answer; it returns the
// lockout that this failure starts, or 0.
func (s *Server) signInFailed(r *http.Request, what string, delay time.Duration, locked bool) time.Duration {
	client := clientAddr(r)
	if locked {
		s.logf("%s: wrong API key from %s (%s): %d failed attempts, refused for %s", what, client, r.RemoteAddr, maxFailures, waitText(lockout))
		return lockout
	}
	s.logf("%s: wrong API key from %s (%s); its answer is delayed %s", what, client, r.RemoteAddr, delay)
	s.signins.sleep(r.Context(), delay)
	return 0
}
