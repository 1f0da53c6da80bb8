package project

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// A JSON data file of a million items is most of a run's bundle build, and
// most of reading it is checking each object and decoding its members,
// which does not depend on the items before it. objDecoder does that on
// every CPU: readJSON cuts the objects out of the stream (cut) and hands
// them over in batches; the items are emitted in file order, by the
// goroutine that reads, so fn, the duplicate check and every error come
// as when one goroutine did everything: an item is emitted only once
// every item before it was.

const (
	decodeBatchItems = 256
	decodeBatchBytes = 1 << 20
)

type decodeBatch struct {
	buf   []byte // the objects, one after another
	ends  []int  // where each ends in buf
	lines []int  // the line where each starts
	out   []decoded
	done  chan struct{}
}

type decoded struct {
	it    Item
	hasID bool
	err   error
}

type objDecoder struct {
	r       *itemReader
	path    string
	keys    []string
	cur     *decodeBatch
	pending []*decodeBatch // handed to the workers, in file order
	free    []*decodeBatch
	work    chan *decodeBatch
	wg      sync.WaitGroup
	max     int   // batches in flight
	err     error // the first error emitting met: nothing is emitted after it
}

func newObjDecoder(r *itemReader, path string, keys []string) *objDecoder {
	threads := max(runtime.GOMAXPROCS(0), 1)
	d := &objDecoder{r: r, path: path, keys: keys, work: make(chan *decodeBatch, 2*threads), max: 2 * threads}
	for range threads {
		d.wg.Go(func() {
			vals := make([][]byte, len(keys))
			for b := range d.work {
				d.decodeBatch(b, vals)
				b.done <- struct{}{}
			}
		})
	}
	return d
}

// add queues the object obj, which starts at line; it may emit the items
// of earlier batches, and returns the first error of those.
func (d *objDecoder) add(obj []byte, line int) error {
	if d.err != nil {
		return d.err
	}
	if d.cur == nil {
		if n := len(d.free); n > 0 {
			d.cur, d.free = d.free[n-1], d.free[:n-1]
		} else {
			d.cur = &decodeBatch{done: make(chan struct{}, 1)}
		}
		d.cur.buf, d.cur.ends, d.cur.lines = d.cur.buf[:0], d.cur.ends[:0], d.cur.lines[:0]
	}
	b := d.cur
	b.buf = append(b.buf, obj...)
	b.ends = append(b.ends, len(b.buf))
	b.lines = append(b.lines, line)
	if len(b.ends) < decodeBatchItems && len(b.buf) < decodeBatchBytes {
		return nil
	}
	d.cur = nil
	d.pending = append(d.pending, b)
	d.work <- b
	if len(d.pending) >= d.max {
		return d.emitOldest()
	}
	return nil
}

// flush emits every item queued, in order, and returns the first error.
func (d *objDecoder) flush() error {
	if d.err != nil {
		return d.err
	}
	if b := d.cur; b != nil {
		d.cur = nil
		d.pending = append(d.pending, b)
		d.work <- b
	}
	for len(d.pending) > 0 {
		if err := d.emitOldest(); err != nil {
			return err
		}
	}
	return nil
}

// close stops the workers; a batch still queued is dropped.
func (d *objDecoder) close() {
	close(d.work)
	d.wg.Wait()
}

func (d *objDecoder) emitOldest() error {
	b := d.pending[0]
	d.pending = d.pending[1:]
	<-b.done
	defer func() { d.free = append(d.free, b) }()
	for i, x := range b.out {
		err := x.err
		if err == nil {
			err = d.r.emit(d.path, b.lines[i], x.it, x.hasID)
		}
		if err != nil {
			d.err = err
			return err
		}
	}
	return nil
}

// decodeBatch checks and decodes every object of b into b.out.
func (d *objDecoder) decodeBatch(b *decodeBatch, vals [][]byte) {
	b.out = b.out[:0]
	start := 0
	for i, end := range b.ends {
		obj := b.buf[start:end]
		start = end
		line := b.lines[i]
		if err := scanObject(obj, d.keys, vals); err != nil {
			var se *jsonSyntaxError
			if errors.As(err, &se) {
				line += bytes.Count(obj[:se.Offset], []byte("\n"))
			}
			b.out = append(b.out, decoded{err: fmt.Errorf("%s: line %d: invalid JSON: %v", d.path, line, err)})
			continue
		}
		var x decoded
		x.it.ID, x.hasID = jsonString(vals[0])
		if d.r.rawText && verbatimJSON(vals[1]) {
			x.it.TextJSON = vals[1]
		} else {
			x.it.Text, _ = jsonString(vals[1])
		}
		if fields := d.r.fields; len(fields) > 0 {
			x.it.Fields = make(map[string]string, len(fields))
			for i, k := range fields {
				if v, ok := jsonString(vals[2+i]); ok {
					x.it.Fields[k] = v
				}
			}
		}
		b.out = append(b.out, x)
	}
}
