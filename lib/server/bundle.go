package server

import (
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"

	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
)

// serveBundle answers an agent's GET of its run's bundle. The run's
// dispatch decides, as it does for every route of a run: the request goes
// to it as a HEAD, with the agent's token and Range. When its answer is
// the file (200 or 206) and the bundle in the run's directory is the file
// it names (the same ETag), this server sends the bytes itself with
// agentproto.ServeBundle, the dispatch's own answer, which sendfiles them
// from the page cache to the agent's connection: they cross neither the
// dispatch's socket nor this process. On a small annotation server, that
// leaves the cores to the agent's download and to Potato. Any other answer,
// and a bundle that changed in between, goes the way of the other routes:
// the GET is proxied to the dispatch.
func (s *Server) serveBundle(sock, id string, w http.ResponseWriter, r *http.Request) {
	head, err := http.NewRequestWithContext(r.Context(), http.MethodHead, "http://agent"+r.URL.RequestURI(), nil)
	if err != nil {
		agentproto.WriteError(w, http.StatusBadRequest, "the request's path: "+err.Error())
		return
	}
	head.Header = r.Header.Clone()
	dropHopByHop(head.Header)
	tr := unixTransport(sock)
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(head)
	if err != nil {
		agentproto.WriteError(w, http.StatusBadGateway, "the run's dispatch did not answer")
		return
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
		f, err := os.Open(filepath.Join(s.Root.RunDir(id), rundir.BundleArchive))
		if err == nil {
			defer f.Close()
			fi, err := f.Stat()
			if err == nil && fi.Mode().IsRegular() && agentproto.BundleETag(fi) == resp.Header.Get("ETag") {
				// The dispatch's headers (Cache-Control, ...), less those
				// of the connection and of the body, which ServeContent
				// sets for what it sends.
				for k, v := range resp.Header {
					w.Header()[k] = v
				}
				dropHopByHop(w.Header())
				w.Header().Del("Content-Length")
				w.Header().Del("Content-Range")
				agentproto.ServeBundle(w, r, f, fi)
				return
			}
		}
	}
	proxyTo(sock).ServeHTTP(w, r)
}

// hopByHop are the headers of one connection, which are not passed on
// (RFC 9110, 7.6.1).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// dropHopByHop removes hopByHop and the headers Connection names.
func dropHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}
