package writeback

import (
	"slices"
	"testing"

	"potato-training/lib/config"
)

// PrelabelLabels reads every form of a prelabel Potato reads, and gives
// the same names for the trainers' joined multilabel form and the list
// Publish stores.
func TestPrelabelLabels(t *testing.T) {
	for _, c := range []struct {
		kind    config.Kind
		payload string
		want    []string
		ok      bool
	}{
		{config.KindNominal, `{"label":"pos","confidence":0.9}`, []string{"pos"}, true},
		{config.KindNominal, `"pos"`, []string{"pos"}, true},
		{config.KindMultilabel, `{"label":"link|html","confidence":0.8}`, []string{"html", "link"}, true},
		{config.KindMultilabel, `[{"label":"link","confidence":0.8},{"label":"html","confidence":0.8}]`, []string{"html", "link"}, true},
		{config.KindMultilabel, `["html","link","html"]`, []string{"html", "link"}, true},
		{config.KindMultilabel, `[]`, nil, true},
		{config.KindNominal, `null`, nil, false},
		{config.KindNominal, `{"confidence":0.5}`, nil, false},
		{config.KindNominal, `3`, nil, false},
	} {
		got, ok := PrelabelLabels(c.kind, []byte(c.payload))
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %q, %v; want %q, %v", c.kind, c.payload, got, ok, c.want, c.ok)
		}
	}
}
