package writeback

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"potato-training/lib/bundle"
	"potato-training/lib/config"
)

const (
	phaseItems     = 80_000
	phaseUnlabeled = 20_000
)

// phaseBundle writes a bundle of phaseItems labelled items split as
// Potato splits them and phaseUnlabeled unlabeled ones, and predictions,
// with probs, for every one of them (100k lines; the train split's are
// skipped at publish). About one prediction in three is wrong. It returns
// the bundle and the predictions' paths.
func phaseBundle(b *testing.B) (string, string) {
	dir := b.TempDir()
	bdir := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bdir, 0o755); err != nil {
		b.Fatal(err)
	}
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
	for i := range phaseItems + phaseUnlabeled {
		id := fmt.Sprintf("i%07d", i)
		split := bundle.UnlabeledSplit
		if i < phaseItems {
			split = bundle.SplitOf(0, id, bundle.DefaultSplits())
			fmt.Fprintf(files[split], `{"instance_id":%q,"text":"item number %d","targets":{"sentiment":%q}}`+"\n", id, i, labels[i%3])
		} else {
			fmt.Fprintf(files[split], `{"instance_id":%q,"text":"item number %d","targets":{}}`+"\n", id, i)
		}
		count[split]++
		k := i % 3
		if i%3 == 0 && i%2 == 0 {
			k = (k + 1) % 3
		}
		c := 0.4 + float64(i%60)/100
		rest := (1 - c) / 2
		fmt.Fprintf(pw, `{"instance_id":%q,"schema_name":"sentiment","payload":{"label":%q,"confidence":%g},"confidence":%g,"probs":{%q:%g,%q:%g,%q:%g}}`+"\n",
			id, labels[k], c, c, labels[k], c, labels[(k+1)%3], rest, labels[(k+2)%3], rest)
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

// cpuTime is the CPU time this process has used, user and system: a
// figure the other work of a shared machine moves less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func copyFile(b *testing.B, from, to string) {
	in, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRunWriteback100k is a run's write-back phase on a bundle of
// 100k items and 100k predictions with probs, one nominal schema, under
// writeback.promote: if_better with the previous run's prelabels in the
// store: calibration, the held-out score, the preview, the gate (the
// comparison with the published run, its paired bootstrap, and the check
// on the val split), the run's items and the publish. each is every step
// reading for itself (writePhaseEach), once the dispatch's one reading
// (writePhaseOnce), in the same run. Each iteration is a new run over a
// fresh copy of the trainer's predictions. phase_s is its time, cpu_s
// the CPU time of the process meanwhile (SQLite's included),
// peak_heap_MB the largest live heap seen during it.
func BenchmarkRunWriteback100k(b *testing.B) {
	for _, c := range []struct {
		name  string
		phase func(*Store, string, string, []bundle.Schema, Options) (Report, error)
	}{{"each", writePhaseEach}, {"once", writePhaseOnce}} {
		b.Run(c.name, func(b *testing.B) { benchPhase(b, c.phase) })
	}
}

func benchPhase(b *testing.B, writePhase func(*Store, string, string, []bundle.Schema, Options) (Report, error)) {
	bdir, orig := phaseBundle(b)
	s, err := OpenStore(filepath.Join(b.TempDir(), "s.sqlite"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m, err := bundle.ReadManifest(bdir)
	if err != nil {
		b.Fatal(err)
	}
	first := Options{Project: "bench", RunID: "r0", Schemas: []string{"sentiment"}, MinConfidence: 0.5, CreatedAt: 1}
	if _, err := s.Publish(bdir, orig, first); err != nil {
		b.Fatal(err)
	}
	var total, cpu time.Duration
	var peak uint64
	var rep Report
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		pred := filepath.Join(b.TempDir(), "predictions.jsonl")
		copyFile(b, orig, pred)
		opt := Options{Project: "bench", RunID: fmt.Sprintf("r%d", i+1), Schemas: []string{"sentiment"}, MinConfidence: 0.5, CreatedAt: float64(i + 2)}
		runtime.GC()
		h := startHeapSampler()
		b.StartTimer()
		t, c := time.Now(), cpuTime()
		if rep, err = writePhase(s, bdir, pred, m.Schemas, opt); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t)
		cpu += cpuTime() - c
		b.StopTimer()
		peak = max(peak, h.done())
	}
	if rep.NRead != phaseItems+phaseUnlabeled || rep.NWritten == 0 {
		b.Fatalf("report %+v", rep)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "phase_s")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu_s")
	b.ReportMetric(float64(peak)/(1<<20), "peak_heap_MB")
}
