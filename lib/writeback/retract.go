package writeback

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Retraction is what RetractRun deleted: a run's rows of
// training_predictions, in all and by schema.
type Retraction struct {
	N        int64            `json:"retracted"`
	BySchema map[string]int64 `json:"by_schema"`
}

// String says it as a log line would: "120 prelabels (sentiment 100,
// topic 20)".
func (r Retraction) String() string {
	s := fmt.Sprintf("%d prelabels", r.N)
	if r.N == 1 {
		s = "1 prelabel"
	}
	if len(r.BySchema) == 0 {
		return s
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(r.BySchema)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, r.BySchema[name]))
	}
	return s + " (" + strings.Join(parts, ", ") + ")"
}

// RetractRun deletes the prelabels run runID wrote to training_predictions,
// as Potato's DELETE .../runs/<id>/predictions does, and says how many of
// each schema it deleted. Counting and deleting are one transaction, so
// the counts are those of the rows deleted. Rows another run has since
// replaced belong to that run and stay; so do the run's row in
// training_runs and its items in training_run_items. A run with no rows
// left (retracted already, or one that wrote none) deletes nothing.
func (s *Store) RetractRun(project, runID string) (Retraction, error) {
	out := Retraction{BySchema: map[string]int64{}}
	fail := func(err error) (Retraction, error) {
		return Retraction{BySchema: map[string]int64{}}, fmt.Errorf("writeback: retract run %q: %w", runID, err)
	}
	if project == "" || runID == "" {
		return fail(errors.New("project and run id are required"))
	}
	tx, err := s.db.Begin()
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	rows, err := tx.Query(`SELECT schema_name, count(*) FROM training_predictions
		WHERE project = ? AND run_id = ? GROUP BY schema_name`, project, runID)
	if err != nil {
		return fail(err)
	}
	var counted int64
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return fail(err)
		}
		out.BySchema[name] = n
		counted += n
	}
	if err := rows.Close(); err != nil {
		return fail(err)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	res, err := tx.Exec(`DELETE FROM training_predictions WHERE project = ? AND run_id = ?`, project, runID)
	if err != nil {
		return fail(err)
	}
	if out.N, err = res.RowsAffected(); err != nil {
		return fail(err)
	}
	if out.N != counted {
		return fail(fmt.Errorf("counted %d rows but deleting removed %d", counted, out.N))
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return out, nil
}
