package dispatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"potato-training/lib/rundir"
)

// LatestRun is what potato-dispatch latest reports: the newest successful
// run of a project (of a schema, of a trainer) and where its model is.
type LatestRun struct {
	RunID   string   `json:"run_id"`
	Trainer string   `json:"trainer"`
	Schemas []string `json:"schemas"`
	// Artifacts is the model's directory on this machine, or the
	// artifact_uri of a model that stayed on a backend's host.
	Artifacts    string            `json:"artifacts"`
	ArtifactURI  string            `json:"artifact_uri"`
	Local        bool              `json:"local"`
	CreatedAt    time.Time         `json:"created_at"`
	FinishedAt   *time.Time        `json:"finished_at,omitempty"`
	ModelVersion string            `json:"model_version,omitempty"`
	Heldout      *rundir.Heldout   `json:"heldout,omitempty"`
	Params       map[string]string `json:"params"`
	// Link is training/latest/<schema> when --schema was given and the
	// link points at this run.
	Link string `json:"link,omitempty"`
}

// ErrNoLatest is the error of a project with no successful run that
// matches.
var ErrNoLatest = errors.New("no successful run")

// Latest finds the newest successful run whose schemas hold schema (any
// when "") and whose trainer is trainer (any when ""), Potato's "latest
// model". A schema that the config does not have is a usage error; no
// such run is ErrNoLatest; a run whose model files were removed from this
// machine is an error too, as a serving script could not use it.
func Latest(configPath, schema, trainer string) (*LatestRun, error) {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return nil, err
	}
	if schema != "" {
		if _, ok := cfg.Scheme(schema); !ok {
			return nil, usagef("schema %q is not in annotation_schemes of %s", schema, cfg.Path)
		}
	}
	root, err := Root(cfg)
	if err != nil {
		return nil, err
	}
	runs, err := root.List()
	if err != nil {
		return nil, err
	}
	r := newestSuccess(runs, schema, trainer, false)
	if r == nil {
		what := ""
		if schema != "" {
			what += " of schema " + schema
		}
		if trainer != "" {
			what += " of trainer " + trainer
		}
		return nil, fmt.Errorf("%w%s in %s", ErrNoLatest, what, filepath.Join(root.Dir, "runs"))
	}
	out := &LatestRun{
		RunID: r.RunID, Trainer: r.Trainer, Schemas: r.Schemas, ArtifactURI: r.ArtifactURI,
		Local: localModel(r.Record), CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt,
		ModelVersion: r.ModelVersion, Heldout: r.Heldout, Params: r.Params,
	}
	if out.Local {
		out.Artifacts = filepath.Join(root.RunDir(r.RunID), rundir.ArtifactsDir)
		if abs, err := filepath.Abs(out.Artifacts); err == nil {
			out.Artifacts = abs
		}
		if _, err := os.Stat(out.Artifacts); err != nil {
			return nil, fmt.Errorf("run %s is the newest successful run, but its model files are gone: %w", r.RunID, err)
		}
	} else {
		out.Artifacts = r.ArtifactURI
	}
	if schema != "" {
		if id, err := root.Latest(schema); err == nil && id == r.RunID {
			out.Link = root.LatestLink(schema)
			if abs, err := filepath.Abs(out.Link); err == nil {
				out.Link = abs
			}
		}
	}
	return out, nil
}
