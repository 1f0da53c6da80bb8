package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"potato-training/lib/bundle"
	"potato-training/lib/events"
	"potato-training/lib/jsonscan"
	"potato-training/lib/trainer/tfidf"
)

// A bundle's splits but unlabeled hold the labelled items, which the fit
// needs at hand; unlabeled.jsonl holds everything else, a million items on
// a large project. Prediction therefore streams every split it predicts:
// it reads a split in batches of rows, scores each batch on its own
// goroutine (every schema of a row at once, so a split is read once), and
// writes the batches' predictions in the split's order, so that the file
// does not depend on the number of threads. Its memory is the models and
// a few batches, whatever the size of the split.

const (
	// streamBatchRows and streamBatchBytes bound one batch: it is cut at
	// whichever comes first (a row longer than streamBatchBytes is a
	// batch alone).
	streamBatchRows  = 256
	streamBatchBytes = 1 << 20
	// maxRowBytes is the longest bundle row read.
	maxRowBytes = 64 << 20
	// maxRowDepth bounds a row's nesting, as encoding/json's own limit.
	maxRowDepth = 10000
)

// rowKeys are the members of a bundle row the trainer reads.
var rowKeys = []string{"instance_id", "text", "targets"}

// parseRow decodes a bundle row, with its targets when withTargets, vals
// being len(rowKeys) scratch values. A row that is not one JSON object,
// or whose members have the wrong types, is an error.
func parseRow(line []byte, vals [][]byte, withTargets bool) (example, error) {
	var x example
	if err := jsonscan.Object(line, rowKeys, vals, maxRowDepth); err != nil {
		return x, err
	}
	str := func(raw []byte, name string) (string, error) {
		if raw == nil || string(raw) == "null" {
			return "", nil
		}
		s, ok := jsonscan.String(raw)
		if !ok {
			return "", fmt.Errorf("%s is not a string", name)
		}
		return s, nil
	}
	var err error
	if x.id, err = str(vals[0], "instance_id"); err != nil {
		return x, err
	}
	if x.text, err = str(vals[1], "text"); err != nil {
		return x, err
	}
	if withTargets && vals[2] != nil {
		if err := json.Unmarshal(vals[2], &x.targets); err != nil {
			return x, fmt.Errorf("targets: %w", err)
		}
	}
	return x, nil
}

// openSplit opens a split of the bundle in dir, path as the manifest
// names it: a path that leaves the bundle is refused (bad_bundle), since
// the manifest may come from the far side of a network. A split whose file
// is missing is (nil, nil).
func openSplit(dir, name, path string) (*os.File, error) {
	f, err := bundle.OpenSplit(dir, path)
	if err != nil {
		if errors.Is(err, bundle.ErrOutside) {
			return nil, &fitError{events.ExitBadSpec, events.CodeBadBundle, fmt.Sprintf("bundle: split %q: path %q leaves the bundle directory", name, path)}
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}

func badRow(path string, n int, err error) error {
	return &fitError{events.ExitBadSpec, events.CodeBadBundle, fmt.Sprintf("%s:%d: %v", filepath.Base(path), n, err)}
}

// schemaModel is a fitted schema.
type schemaModel struct {
	schema bundle.Schema
	model  *tfidf.Model
}

// splitTally is what predicting a split counted: predictions written and,
// per schema, val items with a gold label and those predicted right.
type splitTally struct {
	predictions int
	correct, n  []int
}

// batch is a run of rows of a split, read, then scored, then written.
type batch struct {
	buf   []byte // the rows, one after another
	ends  []int  // where each row ends in buf
	first int    // the line number of its first row
	out   bytes.Buffer
	tally splitTally
	err   error
	done  chan struct{}
}

// predictSplit writes to w the predictions of every model for every row of
// the split read from r (name and path as the manifest has them), in the
// split's order, on threads goroutines. Gold labels are counted for the
// val split.
func predictSplit(ctx context.Context, r io.Reader, name, path string, models []schemaModel, threads int, w io.Writer) (splitTally, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	threads = max(threads, 1)
	inflight := 2 * threads
	free := make(chan *batch, inflight)
	for range inflight {
		free <- &batch{done: make(chan struct{}, 1)}
	}
	work := make(chan *batch, inflight)
	order := make(chan *batch, inflight)
	var readErr error
	go func() {
		defer close(work)
		defer close(order)
		readErr = readBatches(ctx, r, free, work, order)
	}()
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			vals := make([][]byte, len(rowKeys))
			for b := range work {
				b.err = scoreBatch(ctx, b, name, path, models, vals)
				b.done <- struct{}{}
			}
		})
	}
	defer wg.Wait()
	total := splitTally{correct: make([]int, len(models)), n: make([]int, len(models))}
	var err error
	for b := range order {
		<-b.done
		if err == nil && b.err != nil {
			err = b.err
			cancel()
		}
		if err == nil {
			if _, werr := w.Write(b.out.Bytes()); werr != nil {
				err = werr
				cancel()
			}
			total.predictions += b.tally.predictions
			for i := range models {
				total.correct[i] += b.tally.correct[i]
				total.n[i] += b.tally.n[i]
			}
		}
		free <- b
	}
	if err == nil {
		err = readErr
	}
	if err == nil {
		err = ctx.Err()
	}
	return total, err
}

// readBatches cuts r into batches taken from free and hands each to work
// (to score) and to order (to write, in turn).
func readBatches(ctx context.Context, r io.Reader, free <-chan *batch, work, order chan<- *batch) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), maxRowBytes)
	line := 0
	var b *batch
	send := func() {
		work <- b
		order <- b
		b = nil
	}
	for sc.Scan() {
		line++
		if b == nil {
			select {
			case b = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
			b.buf, b.ends, b.first = b.buf[:0], b.ends[:0], line
		}
		b.buf = append(b.buf, sc.Bytes()...)
		b.ends = append(b.ends, len(b.buf))
		if len(b.ends) >= streamBatchRows || len(b.buf) >= streamBatchBytes {
			send()
		}
	}
	if b != nil {
		send()
	}
	return sc.Err()
}

// scoreBatch writes into b.out the predictions of every model for every
// row of b.
func scoreBatch(ctx context.Context, b *batch, name, path string, models []schemaModel, vals [][]byte) error {
	b.out.Reset()
	b.tally = splitTally{correct: resize(b.tally.correct, len(models)), n: resize(b.tally.n, len(models))}
	if err := ctx.Err(); err != nil {
		return err
	}
	enc := json.NewEncoder(&b.out)
	start := 0
	for i, end := range b.ends {
		x, err := parseRow(b.buf[start:end], vals, name == "val")
		start = end
		if err != nil {
			return badRow(path, b.first+i, err)
		}
		for si, sm := range models {
			s := sm.schema
			label, conf, probs := predict(sm.model, s, x.text)
			if err := enc.Encode(prediction{x.id, s.Name, payload{label, conf}, conf, probs}); err != nil {
				return err
			}
			b.tally.predictions++
			if name == "val" {
				if gold, ok := goldLabel(s, x.targets[s.Name]); ok {
					b.tally.n[si]++
					if gold == label {
						b.tally.correct[si]++
					}
				}
			}
		}
	}
	return nil
}

func resize(xs []int, n int) []int {
	if cap(xs) < n {
		return make([]int, n)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}

// predictThreads is the goroutines prediction runs on: limits.num_threads
// when set, else the CPUs Go may use.
func predictThreads(spec Spec) int {
	if spec.Limits.NumThreads > 0 {
		return spec.Limits.NumThreads
	}
	return runtime.GOMAXPROCS(0)
}
