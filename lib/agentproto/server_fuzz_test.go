package agentproto

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// FuzzHandlerBodies sends arbitrary bodies to the routes that take one
// (claim, events, result, predictions), through the handler as the
// server runs it. It must not panic; every answer is JSON (an error's
// with a message); a JSON route is answered 400 exactly when the body is
// not empty and not its JSON; an events body is split into as many
// events and log lines as it has non-blank lines; predictions are stored
// byte for byte.
func FuzzHandlerBodies(f *testing.F) {
	for _, s := range []struct {
		route byte
		body  string
	}{
		{0, `{"backend": "lab", "host": "gpu1", "workdir": "/w", "version": "1"}`},
		{0, ``}, {0, `{"backend": 7}`}, {0, `{"backend": "x"} {"backend": "y"}`}, {0, `[` + strings.Repeat("[", 50)},
		{1, `{"v":1,"event":"log","t":1,"msg":"a"}` + "\n" + `plain output` + "\r\n\n" + `{"v":1,"event":"progress","t":2,"phase":"fit","current":1,"total":2}`},
		{1, "\n\n\r\n"}, {1, "{\"v\":1,\"event\":\"log\",\"msg\":\"\xff\"}\n"}, {1, `{"v":1,"event":"result","status":"finished"}`},
		{2, `{"exit_code": 0, "artifact_uri": "", "error": ""}`}, {2, `{"exit_code": "0"}`}, {2, `{"exit_code": 1e99}`}, {2, `null`},
		{3, `{"id": "a", "predictions": {"s": {"label": "x", "confidence": 0.5}}}` + "\n"}, {3, ""},
	} {
		f.Add(s.route, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route byte, body []byte) {
		fr := newFake(t)
		h := NewHandler(fr, testOptions(HandlerOptions{LongPoll: time.Millisecond, MaxPredictionsMB: 1}))
		method, path := http.MethodPost, PathPrefix+"/runs/"+testRun+"/"
		var into any
		switch route % 4 {
		case 0:
			path, into = PathPrefix+"/claim", new(ClaimRequest)
		case 1:
			path += "events"
		case 2:
			path, into = path+"result", new(Result)
		case 3:
			method, path = http.MethodPut, path+"predictions"
		}
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		code, answer := rec.Code, rec.Body.Bytes()
		if code != http.StatusNoContent {
			if !json.Valid(answer) {
				t.Fatalf("%s %q: %d answer %q is not JSON", path, body, code, answer)
			}
			if code >= 400 {
				var e errorBody
				if json.Unmarshal(answer, &e) != nil || e.Error == "" {
					t.Fatalf("%s %q: %d with no error message: %q", path, body, code, answer)
				}
			}
		}
		switch route % 4 {
		case 0, 2:
			bad := len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, into) != nil
			if bad != (code == http.StatusBadRequest) {
				t.Fatalf("%s %q: answered %d; encoding/json refuses it: %v", path, body, code, bad)
			}
			if !bad && route%4 == 0 && code != http.StatusNoContent {
				t.Fatalf("%s %q: answered %d, want 204 (no run to hand out)", path, body, code)
			}
			if !bad && route%4 == 2 && (code != http.StatusOK || len(fr.results) != 1) {
				t.Fatalf("%s %q: answered %d, %d results", path, body, code, len(fr.results))
			}
		case 1:
			if code != http.StatusOK || len(fr.posts) != 1 {
				t.Fatalf("%s %q: answered %d, %d posts", path, body, code, len(fr.posts))
			}
			lines := 0
			for _, l := range bytes.Split(body, []byte("\n")) {
				if len(bytes.TrimSpace(bytes.TrimSuffix(l, []byte("\r")))) > 0 {
					lines++
				}
			}
			if p := fr.posts[0]; len(p.evs)+len(p.bad) != lines {
				t.Fatalf("%q: %d events and %d log lines from %d lines", body, len(p.evs), len(p.bad), lines)
			}
		case 3:
			got, err := os.ReadFile(fr.predictionsPath())
			if code != http.StatusOK || err != nil || !bytes.Equal(got, body) {
				t.Fatalf("predictions %q: answered %d, stored %q (%v)", body, code, got, err)
			}
		}
	})
}
