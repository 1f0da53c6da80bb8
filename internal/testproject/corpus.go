package testproject

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// Email is one email of the tests' real corpus, testdata/spamassassin.
type Email struct {
	ID    string `json:"id"`
	Text  string `json:"text"`
	Label string `json:"label"` // "spam" or "ham", as the corpus files it
}

// Emails reads the tests' real corpus from the repository at root
// (testdata/spamassassin/emails.jsonl: 500 emails of the SpamAssassin
// public corpus), in an order of its own that mixes ham and spam (by the
// SHA-256 of each id), the same every time.
func Emails(t T, root string) []Email {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "testdata", "spamassassin", "emails.jsonl"))
	must(t, err)
	defer f.Close()
	var out []Email
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e Email
		must(t, json.Unmarshal(sc.Bytes(), &e))
		out = append(out, e)
	}
	must(t, sc.Err())
	key := func(id string) string { s := sha256.Sum256([]byte(id)); return string(s[:]) }
	sort.Slice(out, func(i, j int) bool { return key(out[i].ID) < key(out[j].ID) })
	return out
}

// Signals are the labels of the multiselect schema "signals" of an
// email, which a rule derives from its text, so that a multilabel model
// has answers to learn: "link" (a URL), "reply" (a Subject of Re: or
// Fwd:) and "html" (HTML tags), in that order; none for some emails.
func Signals(text string) []string {
	var out []string
	for _, s := range signalRules {
		if s.re.MatchString(text) {
			out = append(out, s.label)
		}
	}
	return out
}

var signalRules = []struct {
	label string
	re    *regexp.Regexp
}{
	{"link", regexp.MustCompile(`(?i)https?://|www\.`)},
	{"reply", regexp.MustCompile(`(?i)^Subject: *(re|fwd?):`)},
	{"html", regexp.MustCompile(`(?i)<(html|body|p|br|font|table|a )`)},
}

// WriteEmails makes a Potato project in dir from emails: its data file,
// one annotator who labelled the first labelled of them with the
// corpus's label in the radio schema "spam" (labels spam, ham) and with
// their Signals in the multiselect schema "signals", and config.yaml,
// whose model_training block ends with extra. Its grace_seconds is 30, as
// a real model's step on a CPU may take seconds before its trainer sees a
// SIGTERM. It returns the config's path.
func WriteEmails(t T, dir string, emails []Email, labelled int, extra string) string {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
	data, err := os.Create(filepath.Join(dir, "data", "emails.jsonl"))
	must(t, err)
	enc := json.NewEncoder(data)
	state := map[string]any{}
	for i, e := range emails {
		must(t, enc.Encode(map[string]string{"id": e.ID, "text": e.Text}))
		if i < labelled {
			values := []any{[]any{map[string]string{"schema": "spam", "name": e.Label}, "true"}}
			for _, s := range Signals(e.Text) {
				values = append(values, []any{map[string]string{"schema": "signals", "name": s}, "true"})
			}
			state[e.ID] = values
		}
	}
	must(t, data.Close())
	writeAnnotator(t, dir, state)
	cfg := filepath.Join(dir, "config.yaml")
	must(t, os.WriteFile(cfg, []byte(`annotation_task_name: "Spam"
task_dir: "."
data_files: ["data/emails.jsonl"]
item_properties: {id_key: id, text_key: text}
output_annotation_dir: annotation_output
annotation_schemes:
  - {annotation_type: radio, name: spam, labels: [spam, ham]}
  - {annotation_type: multiselect, name: signals, labels: [link, reply, html]}
pre_annotation: {enabled: true}
model_training:
  enabled: true
  grace_seconds: 30
  writeback:
    schemas: [spam]
    include_unlabeled: true
    min_confidence: 0.5
`+extra), 0o644))
	return cfg
}
