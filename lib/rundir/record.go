// run.json's record: the run's state, its step and progress, its score and its promotion.

package rundir

import (
	"fmt"
	"time"

	"potato-training/lib/curve"
)

// Progress is the last progress event's content.
type Progress struct {
	Phase   string  `json:"phase"`
	Current float64 `json:"current"`
	Total   float64 `json:"total"`
	EtaS    float64 `json:"eta_s,omitempty"`
	// At is when the dispatch wrote it: eta_s counts from then.
	At *time.Time `json:"at,omitempty"`
}

// Heldout is the score of the test split's predictions (SPEC B8).
type Heldout struct {
	Schema   string  `json:"schema,omitempty"`
	N        int     `json:"n"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
	// MAE and QWK are an ordinal schema's mean absolute error in scale
	// points and quadratic-weighted kappa.
	MAE *float64 `json:"mae,omitempty"`
	QWK *float64 `json:"qwk,omitempty"`
}

// OrdinalText is ", mean absolute error M points, quadratic-weighted
// kappa Q" for an ordinal schema's held-out score, else "".
func (h Heldout) OrdinalText() string {
	if h.MAE == nil || h.QWK == nil {
		return ""
	}
	return fmt.Sprintf(", mean absolute error %.3f points, quadratic-weighted kappa %.3f", *h.MAE, *h.QWK)
}

// Record is run.json. New fields may be added; readers ignore unknown ones.
type Record struct {
	RunID       string            `json:"run_id"`
	Project     string            `json:"project,omitempty"`
	Trainer     string            `json:"trainer"`
	Schemas     []string          `json:"schemas"`
	Params      map[string]string `json:"params"`
	Backend     string            `json:"backend"`
	BackendType string            `json:"backend_type"`
	RanOn       string            `json:"ran_on"`
	State       string            `json:"state"`
	Step        string            `json:"step"`
	Progress    *Progress         `json:"progress,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	StartedAt   *time.Time        `json:"started_at,omitempty"`
	FinishedAt  *time.Time        `json:"finished_at,omitempty"`
	ExitCode    *int              `json:"exit_code,omitempty"`
	Error       string            `json:"error,omitempty"`
	ErrorCode   string            `json:"error_code,omitempty"`
	Metrics     map[string]any    `json:"metrics,omitempty"`
	Heldout     *Heldout          `json:"heldout,omitempty"`
	ArtifactURI string            `json:"artifact_uri,omitempty"`
	Writeback   map[string]int    `json:"writeback,omitempty"`
	Trigger     string            `json:"trigger"`
	Device      string            `json:"device,omitempty"`
	// Precision is the precision a torch trainer reported training in.
	Precision   string `json:"precision,omitempty"`
	PID         int    `json:"pid,omitempty"`
	Host        string `json:"host,omitempty"`
	AgentSocket string `json:"agent_socket,omitempty"`
	// ModelVersion is the result event's model_version.
	ModelVersion string `json:"model_version,omitempty"`
	// StoreError is the last failed write to Potato's store, with the
	// store's path; empty when the store holds what run.json says.
	StoreError string `json:"store_error,omitempty"`
	// WritebackPending is set when the run trained but its predictions or
	// its run row are not in Potato's store: potato-dispatch writeback
	// applies them.
	WritebackPending bool `json:"writeback_pending,omitempty"`
	// RetractedAt is when potato-dispatch retract first deleted the run's
	// prelabels from Potato's store; Writeback's n_retracted counts them.
	RetractedAt *time.Time `json:"retracted_at,omitempty"`
	// Curve is a learning curve run's: its points, then, once scored, each
	// schema's curve (potato-rundir(5)).
	Curve *curve.Curve `json:"curve,omitempty"`
	// Promotion is, under writeback.promote: if_better, the decision of
	// each writeback schema of the run, by schema.
	Promotion map[string]Promotion `json:"promotion,omitempty"`
	// Calibration is, by schema, how the dispatch calibrated the
	// confidences of the run's predictions (Calibration).
	Calibration map[string]Calibration `json:"calibration,omitempty"`
}

// Promotion is the promotion gate's decision for one schema of a run:
// whether its prelabels were published, its macro-F1 and that of the run
// published before (Against), both on the same N test items and today's
// labels, and the sentence the log, status and page show.
type Promotion struct {
	Published      bool    `json:"published"`
	MacroF1        float64 `json:"macro_f1"`
	Against        string  `json:"against,omitempty"`
	AgainstMacroF1 float64 `json:"against_macro_f1,omitempty"`
	N              int     `json:"n"`
	Reason         string  `json:"reason"`
	// Bootstrap is the paired bootstrap of the two runs' macro-F1s on
	// the N common test items; absent when there was nothing to compare.
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
	// Metric is what the gate judged by when it is not macro-F1: "mae"
	// for an ordinal schema, whose MAE and AgainstMAE are then the two
	// runs' mean absolute errors in scale points, and whose Bootstrap is
	// of the published run's MAE less this run's.
	Metric     string   `json:"metric,omitempty"`
	MAE        *float64 `json:"mae,omitempty"`
	AgainstMAE *float64 `json:"against_mae,omitempty"`
}
