package writeback

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

func BenchmarkPhases(b *testing.B) {
	bdir, preds := benchBundle(b)
	s, _ := OpenStore(filepath.Join(b.TempDir(), "x.sqlite"))
	defer s.Close()
	t0 := time.Now()
	n, err := s.RecordItems("bench", "r1", bdir)
	b.Logf("record %d items %v err %v", n, time.Since(t0), err)
	t0 = time.Now()
	ids, _ := trainIDs(bdir)
	b.Logf("train ids %d %v", len(ids), time.Since(t0))
	t0 = time.Now()
	rep, err := s.Publish(bdir, preds, Options{Project: "bench", RunID: "r1", Schemas: []string{"sentiment"}, MinConfidence: 0.1, CreatedAt: 1})
	b.Logf("publish %+v %v err %v", rep, time.Since(t0), err)
	t0 = time.Now()
	cnt := 0
	scanLines(preds, func(l []byte, _ int) error { var p predLine; cnt++; return jsonUnmarshal(l, &p) })
	b.Logf("parse preds %d %v", cnt, time.Since(t0))
}

var jsonUnmarshal = func(b []byte, v any) error { return json.Unmarshal(b, v) }
