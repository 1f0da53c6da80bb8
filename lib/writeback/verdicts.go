package writeback

import (
	"fmt"
)

// Verdict is one row of Potato's model_review_verdicts: a reviewer's
// judgement of the prelabel Potato showed them for one item and schema
// (assignment_strategy: model_review). Potato makes the table itself
// (migration 0001_model_review_verdicts, primary key project, instance_id,
// schema_name, reviewer): one verdict per item, schema and reviewer, the
// latest replacing the earlier. The toolkit only reads it.
type Verdict struct {
	InstanceID string
	// Schema is "" when the reviewer's client sent none: Potato stores
	// that, and such a verdict names no prelabel.
	Schema   string
	Reviewer string
	// Verdict is accept, correct or reject as Potato checks it; any other
	// value in a row is returned as it is.
	Verdict string
	Note    string
	// UpdatedAt is when the reviewer gave it, in unix seconds.
	UpdatedAt float64
}

// Verdicts returns the project's review verdicts, oldest first; none when
// Potato has not made the table (no review was ever read or given).
func (s *Store) Verdicts(project string) ([]Verdict, error) {
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'model_review_verdicts'`).Scan(&n); err != nil {
		return nil, fmt.Errorf("writeback: review verdicts: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	rows, err := s.db.Query(`SELECT instance_id, schema_name, reviewer, verdict, note, updated_at
		FROM model_review_verdicts WHERE project = ? ORDER BY updated_at, instance_id, schema_name, reviewer`, project)
	if err != nil {
		return nil, fmt.Errorf("writeback: review verdicts: %w", err)
	}
	defer rows.Close()
	var out []Verdict
	for rows.Next() {
		var v Verdict
		if err := rows.Scan(&v.InstanceID, &v.Schema, &v.Reviewer, &v.Verdict, &v.Note, &v.UpdatedAt); err != nil {
			return nil, fmt.Errorf("writeback: review verdicts: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("writeback: review verdicts: %w", err)
	}
	return out, nil
}
