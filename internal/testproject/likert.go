package testproject

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Tweet is one item of the tests' real likert corpus, testdata/vader-likert:
// a tweet of the VADER sentiment data set and three of its raters' ratings,
// integers from -4 (extremely negative) to 4 (extremely positive).
type Tweet struct {
	ID      string  `json:"id"`
	Text    string  `json:"text"`
	Ratings []int   `json:"ratings"`
	Mean    float64 `json:"mean"`
}

// LikertLabels are the five points of the likert schema "sentiment" of
// WriteLikert, in order.
var LikertLabels = []string{"very negative", "negative", "neutral", "positive", "very positive"}

// LikertPoint bins a rating of -4 to 4 onto the five points of
// LikertLabels (testdata/vader-likert/README.md): -4 and -3 are 1, -2 and
// -1 are 2, 0 is 3, 1 and 2 are 4, 3 and 4 are 5.
func LikertPoint(rating int) int {
	switch {
	case rating <= -3:
		return 1
	case rating < 0:
		return 2
	case rating == 0:
		return 3
	case rating <= 2:
		return 4
	}
	return 5
}

// Tweets reads testdata/vader-likert/tweets.jsonl of the repository at
// root, in file order.
func Tweets(t T, root string) []Tweet {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "testdata", "vader-likert", "tweets.jsonl"))
	must(t, err)
	defer f.Close()
	var out []Tweet
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var tw Tweet
		must(t, json.Unmarshal(sc.Bytes(), &tw))
		out = append(out, tw)
	}
	must(t, sc.Err())
	return out
}

// WriteLikert makes a Potato project in dir from tweets: its data file,
// three annotators a1, a2 and a3 who rated the first labelled of them,
// annotator k with the point (LikertPoint) of the tweet's k-th rating, in
// the likert schema "sentiment" of the five LikertLabels, stored as
// Potato stores a likert scale given labels (the chosen label's name),
// and config.yaml, whose model_training block ends with extra. It
// returns the config's path.
func WriteLikert(t T, dir string, tweets []Tweet, labelled int, extra string) string {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	data, err := os.Create(filepath.Join(dir, "data", "tweets.jsonl"))
	must(t, err)
	enc := json.NewEncoder(data)
	states := make([]map[string]any, 3)
	for k := range states {
		states[k] = map[string]any{}
	}
	for i, tw := range tweets {
		must(t, enc.Encode(map[string]string{"id": tw.ID, "text": tw.Text}))
		if i >= labelled {
			continue
		}
		for k := range states {
			if k < len(tw.Ratings) {
				name := LikertLabels[LikertPoint(tw.Ratings[k])-1]
				states[k][tw.ID] = []any{[]any{map[string]string{"schema": "sentiment", "name": name}, name}}
			}
		}
	}
	must(t, data.Close())
	for k, st := range states {
		user := fmt.Sprintf("a%d", k+1)
		must(t, os.MkdirAll(filepath.Join(dir, "annotation_output", user), 0o755))
		b, _ := json.Marshal(map[string]any{"user_id": user, "instance_id_to_label_to_value": st})
		must(t, os.WriteFile(filepath.Join(dir, "annotation_output", user, "user_state.json"), b, 0o644))
	}
	cfg := filepath.Join(dir, "config.yaml")
	labels, _ := json.Marshal(LikertLabels)
	must(t, os.WriteFile(cfg, []byte(`annotation_task_name: "Tweets"
task_dir: "."
data_files: ["data/tweets.jsonl"]
item_properties: {id_key: id, text_key: text}
output_annotation_dir: annotation_output
annotation_schemes:
  - {annotation_type: likert, name: sentiment, description: "How does the tweet feel?", labels: `+string(labels)+`}
pre_annotation: {enabled: true}
model_training:
  enabled: true
  grace_seconds: 30
  aggregation: majority
  writeback:
    schemas: [sentiment]
    include_unlabeled: true
`+extra), 0o644))
	return cfg
}
