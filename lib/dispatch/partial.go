package dispatch

import (
	"os"
	"path/filepath"
	"strings"

	"potato-training/lib/rundir"
)

// PartialPrefix marks what a trainer writes in artifacts/ before it is
// whole (potato-events(5)): a trainer saves a model under this prefix and
// renames it once complete, so that a run that ends early leaves nothing
// half written. A trainer killed before it could clean up (SIGKILL after
// the grace, kill -9) leaves them: the dispatch removes them.
const PartialPrefix = ".partial-"

// removePartial removes the entries of the run's artifacts/ that a trainer
// left under PartialPrefix, for a run that did not succeed, and logs each.
func (d *dispatcher) removePartial() {
	dir := d.run.Path(rundir.ArtifactsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), PartialPrefix) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			d.logf("cannot remove the trainer's unfinished %s: %v", e.Name(), err)
			continue
		}
		d.logf("removed %s, which the trainer left unfinished", filepath.Join(rundir.ArtifactsDir, e.Name()))
	}
}
