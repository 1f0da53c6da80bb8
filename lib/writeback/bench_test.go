package writeback

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

const (
	benchItems     = 1_000_000
	benchUnlabeled = 200_000
)

// benchBundle writes a bundle of benchItems labelled items split as Potato
// splits them, benchUnlabeled unlabeled ones, and predictions for every item
// outside the train split. It returns the bundle and predictions paths.
func benchBundle(b *testing.B) (string, string) {
	dir := b.TempDir()
	bdir := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bdir, 0o755); err != nil {
		b.Fatal(err)
	}
	splits := bundle.DefaultSplits()
	names := []string{"train", "val", "test", bundle.UnlabeledSplit}
	files := map[string]*bufio.Writer{}
	var closers []*os.File
	for _, n := range names {
		f, err := os.Create(filepath.Join(bdir, n+".jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, f)
		files[n] = bufio.NewWriterSize(f, 1<<20)
	}
	pf, err := os.Create(filepath.Join(dir, "predictions.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, pf)
	pw := bufio.NewWriterSize(pf, 1<<20)

	count := map[string]int{}
	labels := []string{"neg", "neu", "pos"}
	for i := range benchItems + benchUnlabeled {
		// The ids in no sorted order, as a data file may have them: i
		// times a prime coprime with the count, modulo the count.
		id := fmt.Sprintf("i%07d", i*7919%(benchItems+benchUnlabeled))
		split := bundle.UnlabeledSplit
		if i < benchItems {
			split = bundle.SplitOf(0, id, splits)
			fmt.Fprintf(files[split], `{"instance_id":%q,"text":"item number %d","targets":{"sentiment":%q}}`+"\n",
				id, i, labels[i%3])
		} else {
			fmt.Fprintf(files[split], `{"instance_id":%q,"text":"item number %d","targets":{}}`+"\n", id, i)
		}
		count[split]++
		if split != "train" {
			c := float64(i%100) / 100
			fmt.Fprintf(pw, `{"instance_id":%q,"schema_name":"sentiment","payload":{"label":%q,"confidence":%g},"confidence":%g}`+"\n",
				id, labels[(i/7)%3], c, c)
		}
	}
	for _, w := range files {
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	if err := pw.Flush(); err != nil {
		b.Fatal(err)
	}
	for _, f := range closers {
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	m := bundle.Manifest{V: 1, Splits: map[string]bundle.SplitFile{},
		Schemas: []bundle.Schema{{Name: "sentiment", AnnotationType: "radio", Kind: config.KindNominal, Labels: labels}}}
	for _, n := range names {
		m.Splits[n] = bundle.SplitFile{Path: n + ".jsonl", Format: "jsonl", N: count[n]}
	}
	j, err := json.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bdir, bundle.ManifestName), j, 0o644); err != nil {
		b.Fatal(err)
	}
	return bdir, filepath.Join(dir, "predictions.jsonl")
}

// heapSampler records the largest live-heap figure seen while it runs,
// read from runtime/metrics, which does not stop the world.
type heapSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	peak uint64
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			h.peak = max(h.peak, s[0].Value.Uint64())
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) done() uint64 {
	close(h.stop)
	h.wg.Wait()
	return h.peak
}

// BenchmarkPublish1M records the items of a 1M-item bundle (its 200k
// unlabeled ones are not recorded, as Potato records none) and publishes predictions for the ~500k items outside the
// train split into a fresh store. items/s is the 1M labelled items over the
// time of RecordItems and Publish together, rows/s every item row recorded
// and prediction line read over the same time; record_s and publish_s split
// that time. heap_MB is the Go heap in use right after them and
// peak_heap_MB the largest live heap seen during them. SQLite's page cache
// is outside the Go heap (2 MB by default).
func BenchmarkPublish1M(b *testing.B) {
	bdir, preds := benchBundle(b)
	opt := Options{Project: "bench", RunID: "r1", Schemas: []string{"sentiment"},
		MinConfidence: 0.1, CreatedAt: 1}
	var record, publish time.Duration
	var peak, inuse uint64
	var rep Report
	var nItems int
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		s, err := OpenStore(filepath.Join(b.TempDir(), fmt.Sprintf("s%d.sqlite", i)))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		h := startHeapSampler()
		b.StartTimer()
		t0 := time.Now()
		if nItems, err = s.RecordItems(opt.Project, opt.RunID, bdir); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if rep, err = s.Publish(bdir, preds, opt); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		b.StopTimer()
		record += t1.Sub(t0)
		publish += t2.Sub(t1)
		peak = max(peak, h.done())
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		inuse = max(inuse, ms.HeapInuse)
		s.Close()
	}
	if nItems != benchItems || rep.NRead == 0 || rep.NWritten == 0 || rep.NRefused != 0 {
		b.Fatalf("recorded %d items, report %+v", nItems, rep)
	}
	n := float64(b.N)
	sec := (record + publish).Seconds() / n
	b.ReportMetric(benchItems/sec, "items/s")
	b.ReportMetric(float64(nItems+rep.NRead)/sec, "rows/s")
	b.ReportMetric(record.Seconds()/n, "record_s")
	b.ReportMetric(publish.Seconds()/n, "publish_s")
	b.ReportMetric(float64(inuse)/(1<<20), "heap_MB")
	b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MB")
}
