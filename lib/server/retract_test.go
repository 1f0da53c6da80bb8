package server

import (
	"database/sql"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"potato-training/internal/testproject"
	"potato-training/lib/rundir"
)

// predictingTrainer predicts "positive" for every test and unlabeled item
// of the bundle, so that its run writes prelabels.
const predictingTrainer = `mkdir -p artifacts
cat bundle/test.jsonl bundle/unlabeled.jsonl | grep -o '"instance_id":"[^"]*"' | sed 's/.*:"//; s/"$//' |
while read id; do
  echo "{\"instance_id\":\"$id\",\"schema_name\":\"sentiment\",\"payload\":{\"label\":\"positive\",\"confidence\":0.9},\"confidence\":0.9}"
done > artifacts/predictions.jsonl
echo '{"v":1,"event":"result","status":"success","predictions_file":"predictions.jsonl"}'`

// dispatchRun runs potato-dispatch run on the project with a trainer
// program, as an operator on the server would (the API starts only
// trainers known by name), and returns the run id.
func (e *apiEnv) dispatchRun(body string, detach bool) string {
	e.t.Helper()
	args := []string{"run", e.cfg, "--trainer", testproject.Trainer(e.t, e.t.TempDir(), body), "--schemas", "sentiment", "--backend", "local"}
	if detach {
		args = append(args, "--detach")
	}
	out, err := exec.Command(filepath.Join(e.bin, "potato-dispatch"), args...).Output()
	id := strings.TrimSpace(string(out))
	if err != nil || !rundir.ValidID(id) {
		e.t.Fatalf("potato-dispatch run: %v, stdout %q", err, out)
	}
	return id
}

// storeCount is one number from the project's Potato store.
func (e *apiEnv) storeCount(query string, args ...any) int {
	e.t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(filepath.Dir(e.cfg), "project.sqlite"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

const runPreds = `SELECT count(*) FROM training_predictions WHERE project = 'Test Project' AND run_id = ?`

// DELETE /runs/<id>/predictions answers {"retracted": n} and empties the
// run's prediction rows; the run stays, in training_runs and in the API,
// whose record says what was retracted. Again: {"retracted": 0}. An
// unknown run is a 404, a run still going a 409; it is a change like the
// others, refused without the key, or from the page without the CSRF
// token, or from another site.
func TestAPIRetract(t *testing.T) {
	e := newAPI(t, testKey, "")
	id := e.dispatchRun(predictingTrainer, false)
	n := e.storeCount(runPreds, id)
	if n == 0 {
		t.Fatal("the run wrote no prelabels")
	}
	path := "/runs/" + id + "/predictions"

	// Refused: nothing deleted.
	cookie := sessionCookie + "=" + e.s.newSession(time.Now())
	for _, c := range []struct {
		what    string
		code    int
		headers []string
	}{
		{"no key", http.StatusUnauthorized, []string{"X-API-Key", ""}},
		{"a wrong key", http.StatusUnauthorized, []string{"X-API-Key", "wrong"}},
		{"a session without its CSRF token", http.StatusForbidden, []string{"X-API-Key", "", "Cookie", cookie}},
		{"another site", http.StatusForbidden, []string{"Origin", "http://evil.example"}},
	} {
		if a := e.do("DELETE", path, "", c.headers...); a.code != c.code {
			t.Errorf("DELETE with %s: %d %s, want %d", c.what, a.code, a.body, c.code)
		}
	}
	if a := e.do("POST", path, ""); a.code != http.StatusMethodNotAllowed || a.hdr.Get("Allow") != "DELETE" {
		t.Errorf("POST %s: %d, Allow %q", path, a.code, a.hdr.Get("Allow"))
	}
	if left := e.storeCount(runPreds, id); left != n {
		t.Fatalf("refused requests deleted prelabels: %d of %d left", left, n)
	}

	a := e.do("DELETE", path, "", "X-API-Key", "", "Cookie", cookie, csrfHeader, e.s.csrfToken(strings.TrimPrefix(cookie, sessionCookie+"=")))
	if a.code != http.StatusOK || strings.Join(strings.Fields(string(a.body)), "") != `{"retracted":`+strconv.Itoa(n)+`}` {
		t.Fatalf("DELETE %s: %d %s, want 200 {\"retracted\": %d}", path, a.code, a.body, n)
	}
	if left := e.storeCount(runPreds, id); left != 0 {
		t.Errorf("%d prelabels left after the retraction", left)
	}
	if rows := e.storeCount(`SELECT count(*) FROM training_runs WHERE run_id = ? AND status = 'success'`, id); rows != 1 {
		t.Errorf("training_runs has %d success rows of the run, want 1", rows)
	}
	d := e.detail(id)
	if d.State != rundir.StateSuccess || d.Writeback["n_retracted"] != n || d.RetractedAt == nil {
		t.Errorf("GET /runs/%s after the retraction: state %s, writeback %v, retracted_at %v", id, d.State, d.Writeback, d.RetractedAt)
	}
	if a := e.do("DELETE", path, ""); a.code != http.StatusOK || strings.Join(strings.Fields(string(a.body)), "") != `{"retracted":0}` {
		t.Errorf("a second DELETE: %d %s, want {\"retracted\": 0}", a.code, a.body)
	}

	for _, p := range []string{"/runs/20261202T135501-000000/predictions", "/runs/..%2f..%2fetc/predictions"} {
		if a := e.do("DELETE", p, ""); a.code != http.StatusNotFound {
			t.Errorf("DELETE %s: %d %s, want 404", p, a.code, a.body)
		}
	}

	// A run still going.
	gate := filepath.Join(t.TempDir(), "go")
	going := e.dispatchRun(`while [ ! -e '`+gate+`' ]; do sleep 0.05; done
`+predictingTrainer, true)
	if a := e.do("DELETE", "/runs/"+going+"/predictions", ""); a.code != http.StatusConflict || !strings.Contains(a.errorText(t), "run "+going+" is ") {
		t.Errorf("DELETE of a run still going: %d %s, want 409", a.code, a.body)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d := e.waitState(going, rundir.StateSuccess); d.RetractedAt != nil || e.storeCount(runPreds, going) == 0 {
		t.Errorf("the run refused a retraction: retracted_at %v, %d prelabels", d.RetractedAt, e.storeCount(runPreds, going))
	}
}
