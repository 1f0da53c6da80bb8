// The scored curve as run.json keeps it (potato-rundir(5)): each schema's
// points, trends, verdicts and sentences, and each label's estimate.

package curve

// Curve is run.json's curve: the points a curve run was asked for and,
// once it is scored, each schema's curve. New fields may be added.
type Curve struct {
	// Points are percentages of each schema's labelled train items.
	Points []float64 `json:"points"`
	// Seed orders the items (Order): the spec's seed.
	Seed int64 `json:"seed"`
	// Draws is how many nested draws the trainer was asked to fit at each
	// point (DrawSeed); absent in a curve of one draw made before draws.
	Draws int `json:"draws,omitempty"`
	// Metric is the score the sentences judge: macro_f1.
	Metric string `json:"metric,omitempty"`
	// Epsilon is the change of the metric per doubling of the training
	// items within which a curve is flat (Judge).
	Epsilon float64  `json:"epsilon,omitempty"`
	Schemas []Schema `json:"schemas,omitempty"`
}

// Schema is one schema's curve.
type Schema struct {
	Schema string `json:"schema"`
	Kind   string `json:"kind"`
	// NTrainSplit is the schema's labelled items in the train split, 100%.
	NTrainSplit int `json:"n_train_split"`
	// NTest is the test items with a label for the schema: every point is
	// scored on the same ones.
	NTest int `json:"n_test"`
	// Draws is how many draws were fitted and scored at every point.
	Draws  int     `json:"draws"`
	Points []Point `json:"points"`
	// Verdict is rising, flat, falling or unclear (Judge).
	Verdict string `json:"verdict"`
	// Trend is macro-F1's change per doubling of the training items over
	// all the points, with its uncertainty.
	Trend Trend `json:"trend"`
	// NTestNeeded and DrawsNeeded, for an unclear curve, are about how
	// many labelled test items (the draws as they are) or how many draws
	// (the test split as it is) would tell, were the trend to stay as it
	// is; absent where that alone would not.
	NTestNeeded int     `json:"n_test_needed,omitempty"`
	DrawsNeeded int     `json:"draws_needed,omitempty"`
	Sentence    string  `json:"sentence"`
	Labels      []Label `json:"labels"`
}

// Trend is the least-squares slope of a score, averaged over the draws,
// against log2 of each point's training items: its change per doubling of
// them. Its uncertainty has two parts: SETest, from which items the test
// split holds (a paired bootstrap of the test items, every point and
// draw resampled together), and SEDraws, from which training items the
// draws took (the spread of the draws' own slopes over √draws; with one
// draw, the scatter of its points about its line). Low and High bound its
// 95% interval, Low90 and High90 its 90% one, with Student's t at DF
// degrees of freedom (Welch-Satterthwaite; at most 1000).
type Trend struct {
	PerDoubling float64 `json:"per_doubling"`
	SETest      float64 `json:"se_test"`
	SEDraws     float64 `json:"se_draws"`
	DF          float64 `json:"df"`
	Low         float64 `json:"low"`
	High        float64 `json:"high"`
	Low90       float64 `json:"low90"`
	High90      float64 `json:"high90"`
}

// Point is the score of the models fitted at one point: the mean over
// its draws.
type Point struct {
	Percent float64 `json:"percent"`
	NTrain  int     `json:"n_train"`
	// NMissing is the test items without a prediction, in the draw that
	// missed most.
	NMissing int     `json:"n_missing"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
	// SETest and SEDraws are the two parts of MacroF1's standard error:
	// the test items' and the draws' (the draws' spread over √draws; 0
	// with one draw).
	SETest  float64 `json:"se_test"`
	SEDraws float64 `json:"se_draws"`
	// Draws are each draw's scores.
	Draws []DrawScore `json:"draws,omitempty"`
	// DAccuracy and DMacroF1 are the changes from the previous point;
	// absent at the first.
	DAccuracy *float64     `json:"d_accuracy,omitempty"`
	DMacroF1  *float64     `json:"d_macro_f1,omitempty"`
	Labels    []PointLabel `json:"labels"`
}

// DrawScore is one draw's score at one point.
type DrawScore struct {
	Draw     int     `json:"draw"`
	Accuracy float64 `json:"accuracy"`
	MacroF1  float64 `json:"macro_f1"`
}

// PointLabel is one label's score at one point, the mean over its draws.
type PointLabel struct {
	Label string `json:"label"`
	// NTrain is the point's training items with the label (the mean
	// over the draws, rounded).
	NTrain int `json:"n_train"`
	// Support is the test items with the label.
	Support   int      `json:"support"`
	Precision float64  `json:"precision"`
	Recall    float64  `json:"recall"`
	F1        float64  `json:"f1"`
	DF1       *float64 `json:"d_f1,omitempty"`
}

// Label is the judgement of one label's F1 over the curve.
type Label struct {
	Label       string    `json:"label"`
	Verdict     string    `json:"verdict"`
	Trend       Trend     `json:"trend"`
	NTestNeeded int       `json:"n_test_needed,omitempty"`
	DrawsNeeded int       `json:"draws_needed,omitempty"`
	Sentence    string    `json:"sentence"`
	Estimate    *Estimate `json:"estimate,omitempty"`
}

// Estimate is how many more training items with a label its F1 would need
// to reach Target, were F1 = A + B ln(n) to hold beyond the last points,
// n the label's training items. It is an extrapolation.
type Estimate struct {
	Target float64 `json:"target"`
	NNow   int     `json:"n_now"`
	// NNeeded is 0, and More too, when the fit puts Target beyond
	// MaxFold times NNow: the curve cannot say.
	NNeeded int `json:"n_needed,omitempty"`
	More    int `json:"more,omitempty"`
	// MoreLow and MoreHigh bound More by the 95% interval of B, BLow to
	// BHigh (its test items' and its draws' parts, as Trend's); MoreHigh
	// is absent when BLow puts Target beyond MaxFold times NNow, or
	// never reaches it.
	MoreLow  int       `json:"more_low,omitempty"`
	MoreHigh int       `json:"more_high,omitempty"`
	A        float64   `json:"a"`
	B        float64   `json:"b"`
	BLow     float64   `json:"b_low"`
	BHigh    float64   `json:"b_high"`
	Fitted   []float64 `json:"fitted"` // the points the fit used
}
