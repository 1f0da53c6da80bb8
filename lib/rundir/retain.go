package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"potato-training/lib/atomicfile"
)

// LatestDir is the directory of the latest/<schema> links under the
// training directory.
const LatestDir = "latest"

// Remove deletes the directory of a finished run: retention's end of a
// run. It takes the run's dispatch lock first (ErrBusy when anyone holds
// it) and refuses a run without exit_code. The directory is renamed to a
// hidden name under runs/ before it is deleted, so that no reader sees
// half a run; a hidden name is no run id, and a later Remove of the run
// finds nothing. Removing a run that is not there is no error.
func (r *Root) Remove(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("no run %q", id)
	}
	dir := r.RunDir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	lock, err := lockIdle(dir, id)
	if err != nil {
		return err
	}
	defer lock.Close()
	if _, err := os.Stat(filepath.Join(dir, ExitCodeFile)); err != nil {
		return fmt.Errorf("run %s has no %s: only a finished run is removed", id, ExitCodeFile)
	}
	gone := filepath.Join(r.Dir, "runs", ".removed-"+id+"-"+randomHex())
	if err := os.Rename(dir, gone); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile by another dispatch
		}
		return err
	}
	return os.RemoveAll(gone)
}

// LatestLink is the path of latest/<schema>.
func (r *Root) LatestLink(schema string) string {
	return filepath.Join(r.Dir, LatestDir, schema)
}

// SetLatest points latest/<schema> at the artifacts directory of run id,
// as the relative link ../runs/<id>/artifacts, so that the project's
// directory can move. The link is replaced atomically: a new link is made
// under a temporary name and renamed over the old one, so that a reader
// finds the old run or the new one, never no link. A schema whose name
// cannot be a file name (empty, with a "/", starting with ".") is
// refused.
func (r *Root) SetLatest(schema, id string) error {
	if schema == "" || strings.ContainsAny(schema, "/\x00") || strings.HasPrefix(schema, ".") {
		return fmt.Errorf("schema %q cannot name a file under %s/", schema, LatestDir)
	}
	if !ValidID(id) {
		return fmt.Errorf("no run %q", id)
	}
	dir := filepath.Join(r.Dir, LatestDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	target := filepath.Join("..", "runs", id, ArtifactsDir)
	link := r.LatestLink(schema)
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	return atomicfile.Symlink(target, link)
}

// Latest returns the run latest/<schema> points at, "" when there is no
// link.
func (r *Root) Latest(schema string) (string, error) {
	target, err := os.Readlink(r.LatestLink(schema))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	parts := strings.Split(filepath.ToSlash(target), "/")
	if len(parts) != 4 || parts[0] != ".." || parts[1] != "runs" || parts[3] != ArtifactsDir || !ValidID(parts[2]) {
		return "", fmt.Errorf("%s points at %s, not at a run's %s", r.LatestLink(schema), target, ArtifactsDir)
	}
	return parts[2], nil
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
