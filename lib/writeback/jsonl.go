package writeback

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
)

// maxLine bounds one JSON line. A longer line is an error, not a reason to
// grow the buffer without limit.
const maxLine = 64 << 20

// scanLines calls fn with each line of the file at path that is not blank,
// and its 1-based line number. The line is only valid during the call. An
// error from fn, or a line over maxLine, stops the scan and is returned with
// the path and line number.
func scanLines(path string, fn func(line []byte, n int) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 256<<10), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := fn(line, n); err != nil {
			return fmt.Errorf("%q, line %d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%q, line %d: %w", path, n+1, err)
	}
	return nil
}

// batchSize is how many values travel from the reader to the writer at once.
const batchSize = 2048

// errStopped tells a producer that its consumer has failed and wants no more.
var errStopped = errors.New("stopped")

// pipeline runs produce on its own goroutine and hands what it emits to
// consume in batches, so that decoding JSON and writing SQLite use two cores.
// Three batches circulate, which keeps memory flat whatever the input size.
// A consume error stops the producer; produce's error is returned otherwise.
func pipeline[T any](produce func(emit func(T) error) error, consume func([]T) error) error {
	const nbuf = 3
	full := make(chan []T, nbuf)
	free := make(chan []T, nbuf)
	for range nbuf {
		free <- make([]T, 0, batchSize)
	}
	done := make(chan struct{})
	var perr error
	go func() {
		defer close(full)
		cur := <-free
		emit := func(v T) error {
			cur = append(cur, v)
			if len(cur) < batchSize {
				return nil
			}
			select {
			case full <- cur:
			case <-done:
				return errStopped
			}
			select {
			case cur = <-free:
			case <-done:
				return errStopped
			}
			return nil
		}
		perr = produce(emit)
		if perr == nil && len(cur) > 0 {
			select {
			case full <- cur:
			case <-done:
			}
		}
	}()
	var cerr error
	for b := range full {
		if cerr == nil {
			if cerr = consume(b); cerr != nil {
				close(done)
			}
		}
		clear(b)
		free <- b[:0]
	}
	if cerr != nil {
		return cerr
	}
	return perr
}
