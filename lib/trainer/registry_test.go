package trainer

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// potato-dispatch(1)'s --trainer names the trainers of the registry, no
// more and no fewer, and exec:PROGRAM; --trainer's help and the "unknown
// trainer" error say them from Choices.
func TestManPageTrainersAreTheRegistry(t *testing.T) {
	path := filepath.Join("..", "..", "man", "potato-dispatch.1")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	start := strings.Index(page, ".It Fl -trainer Ar name\n")
	if start < 0 {
		t.Fatalf("%s has no .It Fl -trainer Ar name", path)
	}
	para := page[start+1:]
	para = para[:strings.Index(para, "\n.It Fl ")]
	// The paragraph's quoted names: the trainers (a-z and -) and
	// exec:; not python3 and the like.
	re := regexp.MustCompile(`(?m)^\.Ql ([a-z]+-[a-z-]+|exec:)`)
	var inMan []string
	for _, m := range re.FindAllStringSubmatch(para, -1) {
		inMan = append(inMan, m[1])
	}
	var want []string
	for _, i := range Runnable() {
		want = append(want, i.Name)
	}
	want = append(want, ExecPrefix)
	if !slices.Equal(inMan, want) {
		t.Errorf("%s lists the trainers %q; the registry has %q", path, inMan, want)
	}
	if got, w := Choices(), "tfidf-logreg, hf-text-classification, embed-logreg, hf-span, hf-llm-classification, decision-calibrate (local only), or exec:PROGRAM"; got != w {
		t.Errorf("Choices() = %q, want %q", got, w)
	}
	for _, name := range want[:len(want)-1] {
		if i, ok := Lookup(name); !ok || i.Name != name {
			t.Errorf("Lookup(%q) = %+v, %v", name, i, ok)
		}
	}
}
