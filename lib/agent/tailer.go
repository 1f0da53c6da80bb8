// The tailer of a SLURM job's events.jsonl, which the compute node
// writes and the agent reads as it grows.

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"sync"

	"potato-training/lib/events"
)

// tailer reads events.jsonl as it grows: whole lines only, from where it
// stopped; a file that shrank (a requeued job starting again) is read
// from the start.
type tailer struct {
	path    string
	off     int64
	partial []byte
	// over is set while the rest of a line longer than events.MaxLine
	// is skipped: its first MaxLine bytes went on as log.
	over bool
	emit func(events.Event)
	raw  func(string)
	mu   sync.Mutex
}

func (t *tailer) read() {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.path)
	if err != nil {
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return
	}
	if st.Size() < t.off {
		t.off, t.partial, t.over = 0, nil, false
	}
	if st.Size() == t.off {
		return
	}
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReaderSize(io.LimitReader(f, st.Size()-t.off), 64<<10)
	// What is held of a line is bounded by MaxLine and the buffer, however
	// long the line is.
	for {
		chunk, err := r.ReadSlice('\n')
		t.off += int64(len(chunk))
		if !t.over {
			t.partial = append(t.partial, chunk...)
			if len(t.partial) > events.MaxLine {
				t.line(t.partial)
				t.partial, t.over = nil, true
			}
		}
		switch {
		case err == nil:
			if !t.over {
				t.line(t.partial)
			}
			t.partial, t.over = t.partial[:0], false
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			// Not a whole line yet: what is held waits for the next read.
			return
		}
	}
}

// flush hands on a last line that lacks its newline.
func (t *tailer) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.partial) > 0 && !t.over {
		t.line(t.partial)
	}
	t.partial, t.over = nil, false
}

func (t *tailer) line(b []byte) {
	b = bytes.TrimRight(b, "\r\n")
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	if e, err := events.Parse(b); err == nil {
		t.emit(e)
		return
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	t.raw(string(b))
}
