package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"potato-training/lib/rundir"
	"potato-training/lib/writeback"
)

// BaseCard is what the model card takes from its base model's card: the
// licence, from the YAML front matter of its README.md.
type BaseCard struct {
	License, LicenseName, LicenseLink string
	// From is the README.md read, "" when none was found.
	From string
}

// ReadBaseCard reads the card of the base model named base: a directory's
// README.md, or, for an id on the Hub, the README.md of the newest
// snapshot in the cache of huggingface_hub on this machine (HF_HUB_CACHE,
// else HF_HOME/hub, else ~/.cache/huggingface/hub). Nothing is
// downloaded: a card not found leaves the licence unknown.
func ReadBaseCard(base string, getenv func(string) string) BaseCard {
	for _, p := range baseCardPaths(base, getenv) {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		c := BaseCard{From: p}
		meta := frontMatter(string(b))
		c.License, _ = meta["license"].(string)
		if c.License == "other" {
			c.LicenseName, _ = meta["license_name"].(string)
			c.LicenseLink, _ = meta["license_link"].(string)
		}
		return c
	}
	return BaseCard{}
}

func baseCardPaths(base string, getenv func(string) string) []string {
	if base == "" {
		return nil
	}
	if st, err := os.Stat(base); err == nil && st.IsDir() {
		return []string{filepath.Join(base, "README.md")}
	}
	if !hubName(base) {
		return nil
	}
	cache := getenv("HF_HUB_CACHE")
	if cache == "" {
		home := getenv("HF_HOME")
		if home == "" {
			xdg := getenv("XDG_CACHE_HOME")
			if xdg == "" {
				h, _ := os.UserHomeDir()
				xdg = filepath.Join(h, ".cache")
			}
			home = filepath.Join(xdg, "huggingface")
		}
		cache = filepath.Join(home, "hub")
	}
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(base, "/", "--"))
	var out []string
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		if sha := strings.TrimSpace(string(ref)); sha != "" && !strings.ContainsAny(sha, "/\\") {
			out = append(out, filepath.Join(repo, "snapshots", sha, "README.md"))
		}
	}
	snaps, _ := filepath.Glob(filepath.Join(repo, "snapshots", "*", "README.md"))
	return append(out, snaps...)
}

// frontMatter is the YAML front matter of a model card, empty when it has
// none or it is not a mapping.
func frontMatter(readme string) map[string]any {
	readme = strings.ReplaceAll(readme, "\r\n", "\n")
	rest, ok := strings.CutPrefix(readme, "---\n")
	if !ok {
		return nil
	}
	meta, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return nil
	}
	var m map[string]any
	if yaml.Unmarshal([]byte(meta), &m) != nil {
		return nil
	}
	return m
}

// CardOptions are what the model card needs beyond the model.
type CardOptions struct {
	// Repo is the repo the card goes to, OWNER/NAME.
	Repo string
	// BaseModel is the base model's id on the Hub when the run named it
	// by a directory; "" leaves the run's own name.
	BaseModel string
	Base      BaseCard
}

// front is the card's YAML front matter, in the Hub's keys.
type front struct {
	License     string   `yaml:"license,omitempty"`
	LicenseName string   `yaml:"license_name,omitempty"`
	LicenseLink string   `yaml:"license_link,omitempty"`
	BaseModel   string   `yaml:"base_model,omitempty"`
	LibraryName string   `yaml:"library_name"`
	PipelineTag string   `yaml:"pipeline_tag"`
	Tags        []string `yaml:"tags"`
}

// BaseID is the base model's id on the Hub, "" when the run named a
// directory and opt names no id.
func (m *Model) BaseID(opt CardOptions) string {
	if opt.BaseModel != "" {
		return opt.BaseModel
	}
	if hubName(m.Card.BaseModel) {
		return m.Card.BaseModel
	}
	return ""
}

// README is the model card, README.md: the Hub's YAML front matter (licence,
// base model, library, task, tags), then what the model is, its labels
// and held-out score per label, what it learned from (the bundle's
// digest), the trainer and its parameters, and how to load it with plain
// transformers and peft. Every value from the run is escaped for
// Markdown, so that a label cannot make a link or markup of the page.
func (m *Model) README(opt CardOptions) string {
	base := m.BaseID(opt)
	multi := m.Card.ProblemType == "multi_label_classification" || m.Card.Kind == "multilabel"
	f := front{License: opt.Base.License, LicenseName: opt.Base.LicenseName, LicenseLink: opt.Base.LicenseLink,
		BaseModel: base, LibraryName: "transformers", PipelineTag: "text-classification",
		Tags: []string{"potato-training", "hf-text-classification", "text-classification"}}
	if m.Kind == KindAdapter {
		f.LibraryName = "peft"
	}
	if m.Card.Lora != nil {
		f.Tags = append(f.Tags, "lora")
	}
	if multi {
		f.Tags = append(f.Tags, "multi-label-classification")
	}
	var y bytes.Buffer
	enc := yaml.NewEncoder(&y)
	enc.SetIndent(2)
	_ = enc.Encode(f)
	var b strings.Builder
	b.WriteString("---\n")
	b.Write(y.Bytes())
	b.WriteString("---\n\n")
	fmt.Fprintf(&b, "# %s\n\n", md(opt.Repo))

	baseText := "`" + code(m.Card.BaseModel) + "`"
	if base != "" {
		baseText = "[" + md(base) + "](https://huggingface.co/" + base + ")"
	} else if m.Card.BaseModel != "" {
		baseText = "the model in the directory `" + code(filepath.Base(filepath.Dir(m.Card.BaseModel))+"/"+filepath.Base(m.Card.BaseModel)) +
			"` of the machine that trained it (its id on the Hub was not given)"
	}
	what := "one label per text"
	if multi {
		what = "any number of labels per text"
	}
	if m.Card.AnnotationTyp != "" {
		what = md(m.Card.AnnotationTyp) + ", " + what
	}
	fmt.Fprintf(&b, "A text classifier for the annotation schema **%s** (%s), fine-tuned from %s on annotations made with Potato, "+
		"by the `hf-text-classification` trainer of potato-training, in run `%s`.\n\n",
		md(m.Schema), what, baseText, code(m.Record.RunID))
	switch m.Kind {
	case KindAdapter:
		b.WriteString("This repository holds a LoRA adapter (peft) and the classifier's head, to be put on the base model; ")
		b.WriteString("its `config.json` is the base model's configuration with this classifier's labels.\n\n")
	case KindMerged:
		b.WriteString("This repository holds the base model with a LoRA adapter merged into it, which loads alone; ")
		b.WriteString("the adapter itself is in `adapter/`.\n\n")
	default:
		b.WriteString("This repository holds the whole model, fine-tuned.\n\n")
	}
	if opt.Base.License == "" {
		b.WriteString("The base model's licence could not be read on the machine that pushed this model (no card of it there): ")
		b.WriteString("check it on the base model's own card before you use or share this model.\n\n")
	} else {
		lic := "`" + code(opt.Base.License) + "`"
		if opt.Base.LicenseName != "" {
			lic += " (" + md(opt.Base.LicenseName) + ")"
		}
		fmt.Fprintf(&b, "The licence is the base model's, %s, as its card states it.\n\n", lic)
	}

	score := m.heldout()
	b.WriteString("## Labels and held-out score\n\n")
	if score != nil && score.N > 0 {
		fmt.Fprintf(&b, "Scored on the run's test split: %d texts that the model never learned from, against the labels annotators gave them", score.N)
		if score.NMissing > 0 {
			fmt.Fprintf(&b, " (%d of them without a prediction, counted wrong)", score.NMissing)
		}
		b.WriteString(". Each label is scored one against the rest.\n\n")
		fmt.Fprintf(&b, "- accuracy: %s", num(score.Accuracy))
		if multi {
			b.WriteString(" (the predicted set of labels is the annotated set)")
		}
		fmt.Fprintf(&b, "\n- macro-F1: %s\n", num(score.MacroF1))
		if score.CohenKappa != nil {
			fmt.Fprintf(&b, "- Cohen's kappa: %s\n", num(*score.CohenKappa))
		}
		if score.MicroF1 != nil {
			fmt.Fprintf(&b, "- micro-F1: %s\n", num(*score.MicroF1))
		}
		b.WriteString("\n")
	} else {
		b.WriteString("The run has no held-out score of this schema: its test split had no labelled text.\n\n")
	}
	b.WriteString("| id | label | support | precision | recall | F1 |\n|---:|---|---:|---:|---:|---:|\n")
	byLabel := map[string]writeback.LabelFigures{}
	if score != nil {
		for _, l := range score.Labels {
			byLabel[l.Label] = l
		}
	}
	for i, l := range m.Card.Labels {
		if fig, ok := byLabel[l]; ok {
			fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %s |\n", i, md(l), fig.Support, num(fig.Precision), num(fig.Recall), num(fig.F1))
		} else {
			fmt.Fprintf(&b, "| %d | %s | | | | |\n", i, md(l))
		}
	}
	if multi && m.Card.Threshold != nil {
		fmt.Fprintf(&b, "\nA label is predicted when its probability (sigmoid) is at least %s.\n", num(*m.Card.Threshold))
	}
	b.WriteString("\n## Training\n\n")
	if m.Bundle != nil {
		sp := m.Bundle.Stats.Splits
		fmt.Fprintf(&b, "- Annotations: the snapshot with digest `%s` (%d texts to train on, %d to validate, %d to test)\n",
			code(m.Bundle.Digest), sp["train"], sp["val"], sp["test"])
	} else {
		b.WriteString("- Annotations: the run's snapshot of them was removed before this push; its digest is in Potato's store, training_runs\n")
	}
	if m.Card.ModelVersion != "" {
		fmt.Fprintf(&b, "- Trainer: `hf-text-classification` of potato-training, model version `%s`\n", code(m.Card.ModelVersion))
	} else {
		b.WriteString("- Trainer: `hf-text-classification` of potato-training\n")
	}
	if m.Card.Lora != nil {
		l := m.Card.Lora
		fmt.Fprintf(&b, "- LoRA: r %d, alpha %s, dropout %s, on %s; trained whole: %s\n", l.R, short(l.Alpha), short(l.Dropout),
			md(strings.Join(slices.Compact(slices.Sorted(slices.Values(l.TargetModules))), ", ")),
			md(orNone(strings.Join(slices.Compact(slices.Sorted(slices.Values(l.ModulesToSave))), ", "))))
	} else {
		b.WriteString("- Fine-tuning: the whole model\n")
	}
	var facts []string
	if m.Card.TrainItems != nil {
		facts = append(facts, fmt.Sprintf("%d training texts", *m.Card.TrainItems))
	}
	if m.Card.ValItems != nil {
		facts = append(facts, fmt.Sprintf("%d validation texts", *m.Card.ValItems))
	}
	if m.Card.BestEpoch != nil {
		facts = append(facts, fmt.Sprintf("best epoch %d", *m.Card.BestEpoch))
	}
	if m.Card.ValAccuracy != nil {
		facts = append(facts, "validation accuracy "+num(*m.Card.ValAccuracy))
	}
	if m.Card.Precision != "" {
		facts = append(facts, "precision "+md(m.Card.Precision))
	}
	if m.Card.Seed != nil {
		facts = append(facts, fmt.Sprintf("seed %d", *m.Card.Seed))
	}
	if m.Record.Device != "" {
		facts = append(facts, "device "+md(m.Record.Device))
	}
	if len(facts) > 0 {
		fmt.Fprintf(&b, "- Run: %s\n", strings.Join(facts, ", "))
	}
	if len(m.Card.Packages) > 0 {
		var p []string
		for _, k := range sortedKeys(m.Card.Packages) {
			p = append(p, md(k)+" "+md(m.Card.Packages[k]))
		}
		fmt.Fprintf(&b, "- Packages: %s\n", strings.Join(p, ", "))
	}
	params := map[string]string{}
	for k, v := range m.Card.Params {
		params[k] = paramText(v)
	}
	for k, v := range m.Record.Params {
		if _, ok := params[k]; !ok {
			params[k] = v
		}
	}
	delete(params, "model") // a path of the machine that trained it; the base model is named above
	if len(params) > 0 {
		b.WriteString("\nThe run's parameters:\n\n| parameter | value |\n|---|---|\n")
		for _, k := range sortedKeys(params) {
			fmt.Fprintf(&b, "| %s | %s |\n", md(k), md(params[k]))
		}
	}
	b.WriteString("\n## How to use\n\nWith transformers")
	if m.Kind == KindAdapter {
		b.WriteString(" and peft")
	}
	b.WriteString(" alone:\n\n```python\n")
	b.WriteString(m.recipe(opt.Repo, base, multi))
	b.WriteString("```\n")
	if m.Kind == KindAdapter && base == "" {
		b.WriteString("\nPut the base model's id on the Hub, or its directory, in place of BASE_MODEL.\n")
	}
	return b.String()
}

// recipe is the card's code: load, tokenize, predict.
func (m *Model) recipe(repo, base string, multi bool) string {
	var b strings.Builder
	b.WriteString("import torch\n")
	if m.Kind == KindAdapter {
		b.WriteString("from peft import PeftModel\n")
		b.WriteString("from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer\n\n")
		fmt.Fprintf(&b, "repo = %s\n", pyString(repo))
		if base == "" {
			base = "BASE_MODEL"
		}
		fmt.Fprintf(&b, "base = AutoModelForSequenceClassification.from_pretrained(%s, config=AutoConfig.from_pretrained(repo))\n", pyString(base))
		b.WriteString("model = PeftModel.from_pretrained(base, repo).eval()\n")
	} else {
		b.WriteString("from transformers import AutoModelForSequenceClassification, AutoTokenizer\n\n")
		fmt.Fprintf(&b, "repo = %s\n", pyString(repo))
		b.WriteString("model = AutoModelForSequenceClassification.from_pretrained(repo).eval()\n")
	}
	b.WriteString("tok = AutoTokenizer.from_pretrained(repo)\n\n")
	maxLen := m.Card.MaxLength
	if maxLen <= 0 {
		maxLen = 512
	}
	if m.Card.Truncation == "head_tail" {
		// The run kept a long text's first quarter and last three
		// quarters, between the tokenizer's special tokens.
		b.WriteString("own, full = tok(\"a\", add_special_tokens=False)[\"input_ids\"], tok(\"a\")[\"input_ids\"]\n")
		b.WriteString("at = next(i for i in range(len(full)) if full[i:i + len(own)] == own)\n")
		b.WriteString("ids = tok(\"The text to classify\", add_special_tokens=False)[\"input_ids\"]\n")
		fmt.Fprintf(&b, "room = %d - (len(full) - len(own))  # as the model was trained: head and tail of a long text\n", maxLen)
		b.WriteString("if len(ids) > room:\n    head = max(1, round(room / 4))\n    ids = ids[:head] + ids[len(ids) - (room - head):]\n")
		b.WriteString("ids = torch.tensor([full[:at] + ids + full[at + len(own):]])\n")
		b.WriteString("with torch.no_grad():\n    logits = model(input_ids=ids).logits[0]\n")
	} else {
		fmt.Fprintf(&b, "enc = tok(\"The text to classify\", truncation=True, max_length=%d, return_tensors=\"pt\")\n", maxLen)
		b.WriteString("with torch.no_grad():\n    logits = model(**enc).logits[0]\n")
	}
	labels := "model.config.id2label"
	if multi {
		t := 0.5
		if m.Card.Threshold != nil {
			t = *m.Card.Threshold
		}
		b.WriteString("probs = torch.sigmoid(logits)\n")
		fmt.Fprintf(&b, "print([%s[i] for i, p in enumerate(probs.tolist()) if p >= %s])\n", labels, strconv.FormatFloat(t, 'g', -1, 64))
	} else {
		b.WriteString("probs = torch.softmax(logits, -1)\n")
		fmt.Fprintf(&b, "print(%s[int(probs.argmax())], float(probs.max()))\n", labels)
	}
	return b.String()
}

// heldout is the run's held-out score of the model's schema, nil when
// the run has none.
func (m *Model) heldout() *writeback.SchemaScore {
	all, ok := m.Record.Metrics["heldout"].(map[string]any)
	if !ok {
		return nil
	}
	raw, ok := all[m.Schema]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var s writeback.SchemaScore
	if json.Unmarshal(b, &s) != nil {
		return nil
	}
	return &s
}

// md escapes text for Markdown within a line: control characters made
// visible, no newline, and each character that could make markup, HTML,
// a table cell's end or a link escaped ("-", "+" and "." start markup
// only at a line's start, where md's text never is).
func md(s string) string {
	s = strings.Join(strings.Fields(rundir.CleanText(s)), " ")
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune("\\`*_{}[]()<>#!|~&$:", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// code is text for a code span: no backtick, no newline.
func code(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(rundir.CleanText(s)), " "), "`", "'")
}

// pyString is s as a Python string literal.
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }

func short(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func paramText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "none"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(bytes.TrimSpace(b))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
