package writeback

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
)

// mapBatchBytes is about how much of a file one goroutine of mapLines
// takes at a time.
const mapBatchBytes = 256 << 10

// lineBatch is some consecutive lines of a file and what mapLines's fn
// made of them.
type lineBatch struct {
	buf  []byte
	ends []int // line i is buf[ends[i-1]:ends[i]]
	nums []int // line i's number in the file
	out  []byte
	err  error
	done chan struct{}
}

// mapLines is scanLines on threads goroutines for a file whose lines are
// turned one by one into output: each goroutine gets a function from
// newFn, for working state of its own, that appends what a line that is
// not blank becomes to dst; the outputs are written to w in line order.
// The first error in line order, from fn (given the path and line number,
// as scanLines gives them), from reading or from w, stops it; w may then
// have had the lines before it. Memory is a few batches of lines a
// goroutine, whatever the size of the file.
func mapLines(path string, threads int, w io.Writer, newFn func() func(line, dst []byte) ([]byte, error)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	threads = max(threads, 1)
	inflight := 2 * threads
	free := make(chan *lineBatch, inflight)
	for range inflight {
		free <- &lineBatch{done: make(chan struct{}, 1)}
	}
	// Neither channel ever holds more than the inflight batches, so a
	// send to them does not block.
	work := make(chan *lineBatch, inflight)
	order := make(chan *lineBatch, inflight)
	stop := make(chan struct{})
	var readErr error
	go func() {
		defer close(order)
		defer close(work)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 256<<10), maxLine)
		n := 0
		var b *lineBatch
		send := func() {
			work <- b
			order <- b
			b = nil
		}
		for sc.Scan() {
			n++
			line := sc.Bytes()
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if b == nil {
				select {
				case b = <-free:
				case <-stop:
					return
				}
				b.buf, b.ends, b.nums, b.err = b.buf[:0], b.ends[:0], b.nums[:0], nil
			}
			b.buf = append(b.buf, line...)
			b.ends = append(b.ends, len(b.buf))
			b.nums = append(b.nums, n)
			if len(b.buf) >= mapBatchBytes {
				send()
			}
		}
		if b != nil {
			send()
		}
		if err := sc.Err(); err != nil {
			readErr = fmt.Errorf("%q, line %d: %w", path, n+1, err)
		}
	}()
	var wg sync.WaitGroup
	for range threads {
		fn := newFn()
		wg.Go(func() {
			for b := range work {
				b.out = b.out[:0]
				start := 0
				for i, end := range b.ends {
					var err error
					if b.out, err = fn(b.buf[start:end], b.out); err != nil {
						b.err = fmt.Errorf("%q, line %d: %w", path, b.nums[i], err)
						break
					}
					start = end
				}
				b.done <- struct{}{}
			}
		})
	}
	for b := range order {
		<-b.done
		if err == nil {
			if err = b.err; err == nil {
				_, err = w.Write(b.out)
			}
			if err != nil {
				close(stop)
			}
		}
		free <- b
	}
	wg.Wait()
	if err == nil {
		err = readErr
	}
	return err
}
