package writeback

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// BenchmarkPreview1M previews a second run over the store that
// BenchmarkPublish1M's bundle leaves (~500k prelabels): the work a run's
// log adds before every write-back. preview_s is its time, publish_s the
// publish of the same predictions measured in the same run, and
// preview/publish their ratio; peak_heap_MB is the largest live heap seen
// during the preview.
func BenchmarkPreview1M(b *testing.B) {
	bdir, preds := benchBundle(b)
	s, err := OpenStore(filepath.Join(b.TempDir(), "s.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	opt := Options{Project: "bench", RunID: "r1", Schemas: []string{"sentiment"}, MinConfidence: 0.1, CreatedAt: 1}
	t0 := time.Now()
	rep, err := s.Publish(bdir, preds, opt)
	if err != nil {
		b.Fatal(err)
	}
	publish := time.Since(t0)
	opt.RunID, opt.CreatedAt = "r2", 2
	var preview time.Duration
	var peak uint64
	var p Preview
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		h := startHeapSampler()
		t := time.Now()
		if p, err = s.Preview(bdir, preds, opt, nil); err != nil {
			b.Fatal(err)
		}
		preview += time.Since(t)
		peak = max(peak, h.done())
	}
	if len(p.Schemas) != 1 || rep.NWritten == 0 || p.Schemas[0].Kept != rep.NWritten {
		b.Fatalf("preview %+v after %d written", p.Schemas, rep.NWritten)
	}
	sec := preview.Seconds() / float64(b.N)
	b.ReportMetric(sec, "preview_s")
	b.ReportMetric(publish.Seconds(), "publish_s")
	b.ReportMetric(sec/publish.Seconds(), "preview/publish")
	b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MB")
}
