package server

import "net/http"

// mountAPI adds the HTTP API under /admin/training/api.
func (s *Server) mountAPI(mux *http.ServeMux) {}
