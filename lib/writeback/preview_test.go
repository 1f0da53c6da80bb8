package writeback

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Preview agrees with the Publish that follows it: the same report (an id,
// a key and a payload size refused, a train item, a schema not enabled, a
// low and a null confidence, an item predicted twice), and per schema the prelabels that
// Publish then adds, changes and keeps, counted in the store before and
// after; a prelabel of a run created later is held, and one of an item the
// run does not predict is left untouched.
func TestPreviewAgreesWithPublish(t *testing.T) {
	s, _ := openTestStore(t)
	bdir := testBundle(t)
	publish(t, s, bdir, sentiment("old", 1),
		pred{"v1", "sentiment", label("pos", 0.9), conf(0.9)},
		pred{"v2", "sentiment", label("neg", 0.9), conf(0.9)},
		pred{"e2", "sentiment", label("neg", 0.9), conf(0.9)})
	publish(t, s, bdir, sentiment("newer", 5), pred{"v3", "sentiment", label("neg", 0.9), conf(0.9)})
	preds := filepath.Join(t.TempDir(), "predictions.jsonl")
	writeLines(t, preds,
		pred{"nope", "sentiment", label("pos", 0.9), conf(0.9)},                                                    // not an item: refused
		`{"instance_id":"e2","schema_name":"sentiment","payload":{"label":"pos","__proto__":{}},"confidence":0.9}`, // refused
		pred{"e2", "sentiment", map[string]any{"label": strings.Repeat("pos", 30000)}, conf(0.9)},                  // refused
		pred{"t1", "sentiment", label("pos", 0.9), conf(0.9)},                                                      // train split
		pred{"e1", "topic", label("pos", 0.9), conf(0.9)},                                                          // not enabled
		pred{"e1", "sentiment", label("pos", 0.2), conf(0.2)},                                                      // below min_confidence
		pred{"e1", "sentiment", label("pos", 0.9), nil},                                                            // null confidence, min 0.5
		pred{"v1", "sentiment", label("pos", 0.7), conf(0.7)},                                                      // same label: kept
		pred{"v2", "sentiment", label("neg", 0.8), conf(0.8)},                                                      // becomes pos below
		pred{"v2", "sentiment", label("pos", 0.8), conf(0.8)},                                                      // changed, the last line counts
		pred{"v3", "sentiment", label("pos", 0.9), conf(0.9)},                                                      // held by "newer"
		pred{"e1", "sentiment", label("neg", 0.6), conf(0.6)},                                                      // added
	)
	opt := sentiment("run", 3)
	labeled := func(item, schema string) bool { return item == "v2" }
	p, err := s.Preview(bdir, preds, opt, labeled)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Publish(bdir, preds, opt)
	if err != nil {
		t.Fatal(err)
	}
	want := SchemaPreview{Schema: "sentiment", Added: 1, Changed: 1, Kept: 1, Untouched: 1, HeldByNewerRun: 1, LabeledTouched: 1}
	if len(p.Schemas) != 1 || p.Schemas[0] != want {
		t.Errorf("preview %+v, want %+v", p.Schemas, want)
	}
	// Publish counts the line it overwrote within the file as written.
	if want := map[string]int{RefusedItem: 1, RefusedKeys: 1, RefusedSize: 1}; !reflect.DeepEqual(rep.RefusedBy, want) {
		t.Errorf("publish refused %v, want %v", rep.RefusedBy, want)
	}
	if p.Report.NRead != rep.NRead || p.Report.NRefused != rep.NRefused || !reflect.DeepEqual(p.Report.RefusedBy, rep.RefusedBy) ||
		p.Report.NSkippedTrainSplit != rep.NSkippedTrainSplit ||
		p.Report.NSkippedSchemaNotEnabled != rep.NSkippedSchemaNotEnabled || p.Report.NSkippedLowConfidence != rep.NSkippedLowConfidence ||
		p.Report.NSkippedNewerRun != rep.NSkippedNewerRun || p.Report.NWritten != rep.NWritten-1 {
		t.Errorf("preview's report %+v, publish's %+v", p.Report, rep)
	}
	after, err := s.Preview(bdir, preds, opt, labeled)
	if err != nil {
		t.Fatal(err)
	}
	if a := after.Schemas[0]; a.Kept != 3 || a.Added+a.Changed != 0 || a.HeldByNewerRun != 1 || a.Untouched != 1 {
		t.Errorf("after the publish: %+v, want 3 kept, 1 held, 1 untouched", a)
	}
}
