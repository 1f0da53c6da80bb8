package rundir

// Calibration is what the dispatch did to one schema's confidences before
// it scored and published them (potato-rundir(5), "calibration"): the
// method fitted on the val split's predictions, and the expected
// calibration error of the test split's confidences before and after.
//
// Method is "temperature" (the trainer gave each prediction its
// per-label probabilities: one temperature divides the logits, fitted by
// the negative log-likelihood of the val split's gold labels),
// "top_label_temperature" (the trainer gave only the confidence of its
// choice: one temperature divides that confidence's logit, fitted on
// whether the val split's choices were right), or "none" with Reason
// saying why the confidences were left as the trainer gave them. The fit's
// targets are smoothed, (N+ + 0.5)/(N+ + 1) for a right answer and
// 0.5/(N- + 1) for a wrong one, so that a val split the model gets all
// right does not drive the confidences to 1.
type Calibration struct {
	Method string `json:"method"`
	// Temperature is the fitted temperature: above 1 the trainer was
	// overconfident, below 1 underconfident; 1 when Method is none.
	Temperature float64 `json:"temperature"`
	// NVal is the val items with a gold label and a prediction with a
	// confidence that the fit could use; NTest the same of the test split,
	// on which the ECEs are measured.
	NVal  int `json:"n_val"`
	NTest int `json:"n_test"`
	// Unit is what a point of the ECE and the bins is: "item" (a nominal
	// schema, or a multilabel one without per-label probabilities: the
	// confidence of the prediction against whether it was right) or
	// "label_decision" (a multilabel schema with per-label
	// probabilities: each label of each item, the probability of the
	// choice made for it against whether that choice was right).
	Unit string `json:"unit,omitempty"`
	// Binning is how the ECE bins confidences: "10 equal-width bins".
	Binning string `json:"binning,omitempty"`
	// ECEBefore and ECEAfter are the expected calibration error of the
	// test split: the trainer's confidences, and the calibrated ones. Absent
	// without scored test items; ECEAfter absent when Method is none.
	ECEBefore *float64 `json:"ece_before,omitempty"`
	ECEAfter  *float64 `json:"ece_after,omitempty"`
	// Before and After are the reliability diagram's bins on the test
	// split, the empty ones left out.
	Before []ReliabilityBin `json:"bins_before,omitempty"`
	After  []ReliabilityBin `json:"bins_after,omitempty"`
	// NRewritten counts the predictions (of every split) whose confidence
	// was replaced by the calibrated one.
	NRewritten int    `json:"n_rewritten"`
	Reason     string `json:"reason,omitempty"`
}

// ReliabilityBin is one bin of a reliability diagram: the confidences in
// [Lo, Hi) (the last bin includes 1), their mean, the share of them that
// were right, and how many.
type ReliabilityBin struct {
	Lo         float64 `json:"lo"`
	Hi         float64 `json:"hi"`
	Confidence float64 `json:"confidence"`
	Accuracy   float64 `json:"accuracy"`
	N          int     `json:"n"`
}

// Calibration methods.
const (
	CalibrationTemperature         = "temperature"
	CalibrationTopLabelTemperature = "top_label_temperature"
	CalibrationNone                = "none"
)

// Bootstrap is a paired bootstrap of the difference of two runs'
// macro-F1 (this run's less the published run's) on the same test items:
// Resamples draws of the items with replacement, from Seed. Low and High
// bound its central 95%; PWorse is the share of draws in which this run
// scored below the published one.
type Bootstrap struct {
	Resamples int     `json:"resamples"`
	Seed      uint64  `json:"seed"`
	Diff      float64 `json:"diff"`
	Low       float64 `json:"low"`
	High      float64 `json:"high"`
	PWorse    float64 `json:"p_worse"`
}
