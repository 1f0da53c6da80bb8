package server

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"potato-training/lib/validate"
)

// proxies are model_training.trusted_proxies: the reverse proxies whose
// X-Forwarded-For and X-Forwarded-Proto the server believes.
type proxies []netip.Prefix

func parseProxies(list []string) proxies {
	var out proxies
	for _, s := range list {
		// validate refuses the config of a server whose entries do not
		// parse; one that slipped through trusts nothing.
		if p, err := validate.ParseProxy(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (p proxies) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, pre := range p {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

func peerAddr(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err == nil
}

// withProxies makes the forwarding headers what the handlers may believe.
// From a peer that is not a trusted proxy, X-Forwarded-For and
// X-Forwarded-Proto are removed: anyone can write them. From a trusted
// proxy, X-Forwarded-For becomes the one address that sent the request:
// walking its hops from the nearest, the first that is not a trusted proxy
// itself (what a client wrote before the proxies' own hops is not
// believed); X-Forwarded-Proto keeps its first value.
func (s *Server) withProxies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, ok := peerAddr(r)
		if !ok || !s.proxies.trusted(peer) {
			r.Header.Del("X-Forwarded-For")
			r.Header.Del("X-Forwarded-Proto")
			h.ServeHTTP(w, r)
			return
		}
		var hops []string
		for _, v := range r.Header.Values("X-Forwarded-For") {
			hops = append(hops, strings.Split(v, ",")...)
		}
		r.Header.Del("X-Forwarded-For")
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // not an address: what comes before it is not believed either
			}
			if a = a.Unmap(); !s.proxies.trusted(a) || i == 0 {
				r.Header.Set("X-Forwarded-For", a.String())
				break
			}
		}
		if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
			v, _, _ := strings.Cut(p, ",")
			r.Header.Set("X-Forwarded-Proto", strings.ToLower(strings.TrimSpace(v)))
		}
		h.ServeHTTP(w, r)
	})
}

// msgBadHost answers a request for a host name the server does not
// answer for.
const msgBadHost = "Host %q is not a name this server answers for: add it to model_training.allowed_hosts"

// withHostCheck refuses (421) a request of the page or the API whose Host
// is a name the server does not answer for: a page of another site whose
// name an attacker made resolve to this server (DNS rebinding) sends its
// own name. Allowed are IP addresses, localhost, this machine's name,
// model_training.allowed_hosts and the names of the TLS certificate. The
// agents' routes carry their token, not a browser's cookie, and are left
// alone.
func (s *Server) withHostCheck(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, agentPrefix+"/") && !s.hostAllowed(r.Host) {
			s.logf("refused a request for Host %q from %s (%s): not a name this server answers for", r.Host, clientAddr(r), r.RemoteAddr)
			http.Error(w, fmt.Sprintf(msgBadHost, r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether hostport (a request's Host) names this
// server.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if host == "localhost" {
		return true
	}
	if name, err := os.Hostname(); err == nil {
		name = strings.ToLower(name)
		if host == name || host == strings.SplitN(name, ".", 2)[0] {
			return true
		}
	}
	for _, a := range s.Config.Training.AllowedHosts {
		if strings.EqualFold(strings.TrimSuffix(a, "."), host) {
			return true
		}
	}
	if s.TLS != nil {
		for _, n := range s.TLS.Names() {
			if strings.EqualFold(n, host) || strings.HasPrefix(n, "*.") && strings.HasSuffix(host, n[1:]) && !strings.Contains(strings.TrimSuffix(host, n[1:]), ".") {
				return true
			}
		}
	}
	return false
}
