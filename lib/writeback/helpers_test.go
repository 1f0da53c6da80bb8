package writeback

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	// The driver the package leaves to the programs that open the store.
	_ "modernc.org/sqlite"
)

// writeLines writes each value as one JSON line; a string is written as it
// is, so tests can write malformed lines.
func writeLines(t testing.TB, path string, lines ...any) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		if s, ok := l.(string); ok {
			b.WriteString(s)
		} else {
			j, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

type row struct {
	ID      string         `json:"instance_id"`
	Text    string         `json:"text"`
	Targets map[string]any `json:"targets"`
}

type pred struct {
	ID         string   `json:"instance_id"`
	Schema     string   `json:"schema_name"`
	Payload    any      `json:"payload"`
	Confidence *float64 `json:"confidence"`
}

func conf(c float64) *float64 { return &c }

func label(l string, c float64) map[string]any {
	return map[string]any{"label": l, "confidence": c}
}

// testBundle writes a bundle without a manifest: train t1, t2; val v1..v3;
// test e1, e2; each with a "sentiment" target.
func testBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	target := map[string]any{"sentiment": "pos"}
	writeLines(t, filepath.Join(dir, "train.jsonl"),
		row{"t1", "a", target}, row{"t2", "b", target})
	writeLines(t, filepath.Join(dir, "val.jsonl"),
		row{"v1", "c", target}, row{"v2", "d", target}, row{"v3", "e", target})
	writeLines(t, filepath.Join(dir, "test.jsonl"),
		row{"e1", "f", target}, row{"e2", "g", target})
	return dir
}

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), StoreName)
	s, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// predictionRows is training_predictions as sorted text, one row a line.
func predictionRows(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rs, err := db.Query(`SELECT project, instance_id, schema_name, run_id, payload,
		quote(confidence), created_at FROM training_predictions
		ORDER BY project, instance_id, schema_name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var project, id, schema, run, payload, c string
		var created float64
		if err := rs.Scan(&project, &id, &schema, &run, &payload, &c, &created); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %s %s %s %s %v", project, id, schema, run, payload, c, created))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runOf is the run_id of the prelabel for (item, schema), or "" when none.
func runOf(t *testing.T, db *sql.DB, project, id, schema string) string {
	t.Helper()
	var run string
	err := db.QueryRow(`SELECT run_id FROM training_predictions
		WHERE project = ? AND instance_id = ? AND schema_name = ?`, project, id, schema).Scan(&run)
	if err == sql.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return run
}
