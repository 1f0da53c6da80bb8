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

// errStopped tells a producer that its consumer has failed and wants no more.
var errStopped = errors.New("stopped")

// pipeline runs produce on its own goroutine and hands what it sends to
// consume, so that reading JSON and writing SQLite use two cores. At most
// a few values wait between them, which keeps memory flat whatever the
// input size. A consume error stops the producer and is returned; otherwise
// produce's error is.
func pipeline[T any](produce func(send func(T) error) error, consume func(T) error) error {
	ch := make(chan T, 4)
	done := make(chan struct{})
	var perr error
	go func() {
		defer close(ch)
		perr = produce(func(v T) error {
			select {
			case ch <- v:
				return nil
			case <-done:
				return errStopped
			}
		})
	}()
	var cerr error
	for v := range ch {
		if cerr == nil {
			if cerr = consume(v); cerr != nil {
				close(done)
			}
		}
	}
	if cerr != nil {
		return cerr
	}
	return perr
}
