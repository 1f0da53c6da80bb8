// Package server is potato-server, the thin server of potato-server(1): the
// HTTP API under /admin/training/api, the agent routes under
// /api/training/agent/v1, which hand queued runs to polling agents and
// proxy their requests to each run's dispatch, and the Training page. It
// keeps no state of its own: runs are potato-dispatch processes and
// their run directories (potato-rundir(5)), so a run goes on while the
// server restarts.
package server

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"potato-training/lib/config"
	"potato-training/lib/rundir"
)

// Server serves one project.
type Server struct {
	// ConfigPath is the project's config, as given; Config is it loaded.
	ConfigPath string
	Config     *config.Config
	Root       *rundir.Root
	// Dispatch and Check are the potato-dispatch and potato-check
	// executables the server starts.
	Dispatch string
	Check    string
	// PagePoll and PageIdlePoll are how often the page asks for the runs
	// while a run is queued or executing and otherwise (default 2 s and
	// 10 s).
	PagePoll, PageIdlePoll time.Duration
	// LongPoll bounds a claim's wait (default 25 s).
	LongPoll time.Duration
	// Logf, when set, receives the server's log lines.
	Logf func(format string, args ...any)
	// TLS, when set, is the certificate Serve serves HTTPS with.
	TLS *Certs

	once   sync.Once
	broker *broker
	// signins counts failed sign-ins per client.
	signins *limiter
	// runs keeps finished runs' records between the page's polls.
	runs rundir.Cache
	// metrics keeps what was read of runs' metric events (model.go).
	metrics metricCache
	// limits bound slow and half-sent requests and the connections.
	limits limits
	// keys is admin_api_key as the config holds it now, and the sessions
	// signed out (session.go).
	keys keyState
	// proxies are model_training.trusted_proxies (proxy.go).
	proxies proxies
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func (s *Server) init() {
	s.once.Do(func() {
		if s.LongPoll <= 0 {
			s.LongPoll = 25 * time.Second
		}
		if s.PagePoll <= 0 {
			s.PagePoll = pagePoll
		}
		if s.PageIdlePoll <= 0 {
			s.PageIdlePoll = pageIdlePoll
		}
		s.broker = newBroker(s.Root)
		s.signins = newLimiter()
		if s.Config != nil {
			s.proxies = parseProxies(s.Config.Training.TrustedProxies)
		}
		if s.limits == (limits{}) {
			s.limits = defaultLimits
		}
	})
}

// Handler routes a request to the agent routes, the API or the page.
func (s *Server) Handler() http.Handler {
	s.init()
	mux := http.NewServeMux()
	mux.HandleFunc(agentPrefix+"/", s.serveAgent)
	s.mountAPI(mux)
	s.mountPage(mux)
	return s.withProxies(withHeaders(s.withHostCheck(s.withDeadlines(mux))))
}

// withHeaders sets the headers every answer carries.
func withHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if secure(r) {
			// Over https, directly or through a trusted proxy: browsers
			// keep to https for this host for a year.
			w.Header().Set("Strict-Transport-Security", "max-age=31536000")
		}
		if strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(r.URL.Path, "/admin/training/api/") {
			w.Header().Set("Cache-Control", "no-store")
		}
		h.ServeHTTP(w, r)
	})
}
