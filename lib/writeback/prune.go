package writeback

import (
	"fmt"
)

// CitedRuns returns the runs of project whose prelabels are still in
// training_predictions: retention never deletes those (Potato's
// prune_runs).
func (s *Store) CitedRuns(project string) (map[string]bool, error) {
	rs, err := s.db.Query(`SELECT DISTINCT run_id FROM training_predictions WHERE project = ?`, project)
	if err != nil {
		return nil, fmt.Errorf("writeback: cited runs: %w", err)
	}
	defer rs.Close()
	out := map[string]bool{}
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			return nil, fmt.Errorf("writeback: cited runs: %w", err)
		}
		out[id] = true
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("writeback: cited runs: %w", err)
	}
	return out, nil
}

// PruneRuns deletes the rows of training_runs and training_run_items of
// each run of ids, in one transaction, and returns the ids it deleted. A
// run that a training_predictions row still cites is left whole and not
// returned: the check is made inside the transaction, so a write-back
// that lands between a caller's CitedRuns and this call keeps its run.
func (s *Store) PruneRuns(project string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tx, err := s.db.Begin()
	if err != nil {
		return nil, fmt.Errorf("writeback: prune runs: %w", err)
	}
	defer tx.Rollback()
	var pruned []string
	for _, id := range ids {
		var cited int
		if err := tx.QueryRow(`SELECT EXISTS (SELECT 1 FROM training_predictions WHERE project = ? AND run_id = ?)`,
			project, id).Scan(&cited); err != nil {
			return nil, fmt.Errorf("writeback: prune run %q: %w", id, err)
		}
		if cited != 0 {
			continue
		}
		if _, err := tx.Exec(`DELETE FROM training_run_items WHERE project = ? AND run_id = ?`, project, id); err != nil {
			return nil, fmt.Errorf("writeback: prune run %q: %w", id, err)
		}
		if _, err := tx.Exec(`DELETE FROM training_runs WHERE project = ? AND run_id = ?`, project, id); err != nil {
			return nil, fmt.Errorf("writeback: prune run %q: %w", id, err)
		}
		pruned = append(pruned, id)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("writeback: prune runs: %w", err)
	}
	return pruned, nil
}
