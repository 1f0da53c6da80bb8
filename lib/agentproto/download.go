// The bundle's download (Client.DownloadBundle): resumed with a Range
// request after a transfer breaks off, hashed as the bytes are written,
// flushed to disk in the background, and renamed into place once its
// size and sha256 match the claim's.

package agentproto

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"potato-training/lib/atomicfile"
)

// DownloadBundle downloads the run's bundle to dst. It writes dst+".part"
// and, when a transfer breaks off, asks for the rest with a Range request,
// up to BundleAttempts requests in all, waiting a little longer before
// each. The file must then have want's size and sha256, or it is removed
// and that is the error; it is renamed to dst only when it does. progress,
// when set, is called as bytes arrive.
//
// The sha256 is computed as the bytes are written, across the attempts,
// so the file is never read back. The file is fsynced before the rename;
// while the bytes arrive, a flusher has the disk write what came so far,
// so that fsync finds little left.
func (c *Client) DownloadBundle(ctx context.Context, runID, dst string, want BundleInfo, progress func(done, total int64)) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("downloading the bundle: %w", err)
		}
	}()
	route, err := runRoute(runID, "bundle")
	if err != nil {
		return err
	}
	if want.Bytes <= 0 {
		return fmt.Errorf("the claim gives the bundle's size as %d", want.Bytes)
	}
	if b, err := hex.DecodeString(want.SHA256); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("the claim's bundle sha256 %q is not 64 hex digits", want.SHA256)
	}
	part := dst + ".part"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	kept := false
	defer func() {
		if f != nil {
			f.Close()
		}
		if !kept {
			os.Remove(part)
		}
	}()

	d := &download{c: c, route: route, f: f, h: newHasher(), fl: newFlusher(f), total: want.Bytes, progress: progress}
	defer d.h.close()
	defer d.fl.stop()
	var last error
	attempt := 0
	for ; attempt < BundleAttempts && !d.complete; attempt++ {
		if attempt > 0 {
			wait := c.backoff << (attempt - 1)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(wait, 4*time.Second)):
			}
		}
		retry, err := d.attempt(ctx)
		if err == nil {
			continue
		}
		if !retry || ctx.Err() != nil {
			return err
		}
		last = err
	}
	if !d.complete {
		return fmt.Errorf("gave up after %d attempts: %w", attempt, last)
	}

	if d.done != want.Bytes {
		return fmt.Errorf("got %d bytes, the claim says %d", d.done, want.Bytes)
	}
	if got := hex.EncodeToString(d.h.sum()); !strings.EqualFold(got, want.SHA256) {
		return fmt.Errorf("sha256 mismatch: got %s, the claim says %s", got, want.SHA256)
	}
	// An error of a flush in the background is reported there and only
	// there: the fsync on the same file would not see it again.
	if err := d.fl.stop(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return err
	}
	if err := atomicfile.Promote(part, dst); err != nil {
		return err
	}
	kept = true
	return nil
}

// download is the state of one bundle download across its attempts.
type download struct {
	c         *Client
	route     string
	f         *os.File
	h         *hasher // sha256 of the bytes in f
	fl        *flusher
	total     int64
	done      int64  // bytes in f
	validator string // ETag or Last-Modified of the first answer, for If-Range
	complete  bool
	progress  func(done, total int64)
}

// attempt makes one request for what is missing. retry is false for an
// error another attempt cannot cure.
func (d *download) attempt(ctx context.Context) (retry bool, err error) {
	hdr := http.Header{}
	if d.done > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", d.done))
		if d.validator != "" {
			hdr.Set("If-Range", d.validator)
		}
	}
	resp, err := d.c.request(ctx, http.MethodGet, d.route, nil, 0, hdr)
	if err != nil {
		var he *HTTPError
		if errors.As(err, &he) {
			if he.Code == http.StatusRequestedRangeNotSatisfiable && d.done == d.total {
				d.complete = true
				return false, nil
			}
			if he.Code == http.StatusRequestedRangeNotSatisfiable {
				if rerr := d.restart(); rerr != nil {
					return false, rerr
				}
				return true, err
			}
			if he.Code/100 == 4 && he.Code != http.StatusRequestTimeout && he.Code != http.StatusTooManyRequests {
				return false, err
			}
		}
		return true, err
	}
	defer resp.Body.Close()
	end := d.total // where this answer's body ends
	switch resp.StatusCode {
	case http.StatusOK:
		// The whole file: the server ignored the range, or the bundle
		// changed since the first answer.
		if err := d.restart(); err != nil {
			return false, err
		}
		if resp.ContentLength >= 0 {
			end = resp.ContentLength
		}
	case http.StatusPartialContent:
		start, last, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != d.done {
			if err := d.restart(); err != nil {
				return false, err
			}
			return true, fmt.Errorf("the server sent range %q for bytes=%d-", resp.Header.Get("Content-Range"), d.done)
		}
		end = last + 1
	default:
		return false, fmt.Errorf("unexpected answer %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if end > d.total {
		return false, fmt.Errorf("the server sends %d bytes, the claim says %d", end, d.total)
	}
	if d.validator == "" {
		if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
			d.validator = et
		} else {
			d.validator = resp.Header.Get("Last-Modified")
		}
	}
	body := io.LimitReader(resp.Body, end-d.done)
	for {
		buf := d.h.buffer()
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := d.f.Write(buf[:n]); err != nil {
				d.h.give(buf[:0])
				return false, err
			}
			d.h.give(buf[:n])
			d.done += int64(n)
			d.fl.wrote(d.done)
			if d.progress != nil {
				d.progress(d.done, d.total)
			}
		}
		if n == 0 {
			d.h.give(buf[:0])
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return true, fmt.Errorf("transfer broke off at byte %d of %d: %w", d.done, d.total, rerr)
		}
	}
	if d.done < end {
		return true, fmt.Errorf("transfer broke off at byte %d of %d", d.done, d.total)
	}
	d.complete = d.done == d.total
	if !d.complete {
		return false, fmt.Errorf("the server's bundle has %d bytes, the claim says %d", d.done, d.total)
	}
	return false, nil
}

// restart empties the file, for an answer that starts at byte 0.
func (d *download) restart() error {
	d.done, d.validator = 0, ""
	d.fl.wrote(0)
	d.h.reset()
	if err := d.f.Truncate(0); err != nil {
		return err
	}
	_, err := d.f.Seek(0, io.SeekStart)
	return err
}

// flusher makes a download's bytes durable while more arrive: every
// flushEvery bytes written, a goroutine of its own syncs the file's data
// (fdatasync on Linux), which has the disk, and any cache below it, write
// them. The loop that reads and writes never waits for it: one flush may
// wait behind the one going, and a flush due while one waits is dropped,
// since the waiting one writes its bytes too. Without the flusher, the
// fsync before the rename would write the whole file then.
type flusher struct {
	f     *os.File
	kick  chan struct{}
	ended chan struct{}
	last  int64 // bytes written when a flush was last due
	err   error // the first flush's error, read after ended
	done  bool
}

// flushEvery is a variable for the tests, which flush often.
var flushEvery int64 = 16 << 20

func newFlusher(f *os.File) *flusher {
	x := &flusher{f: f, kick: make(chan struct{}, 1), ended: make(chan struct{})}
	go func() {
		defer close(x.ended)
		for range x.kick {
			if err := datasync(x.f); err != nil && x.err == nil {
				x.err = err
			}
		}
	}()
	return x
}

// wrote says the file now has n bytes; 0 after it is emptied.
func (x *flusher) wrote(n int64) {
	if n < x.last {
		x.last = 0
	}
	if n-x.last < flushEvery {
		return
	}
	x.last = n
	select {
	case x.kick <- struct{}{}:
	default: // a flush is due or going: it writes these bytes too
	}
}

// stop waits for a flush that is going, and returns the first flush's
// error. It may be called more than once.
func (x *flusher) stop() error {
	if !x.done {
		x.done = true
		close(x.kick)
	}
	<-x.ended
	return x.err
}

// hasher computes the download's sha256 on a goroutine of its own, over
// the buffers the download reads into and writes from: the loop that
// reads and writes does not wait for the hash, and no byte is copied
// for it. A buffer comes from buffer and goes back through give, with the
// bytes to hash.
type hasher struct {
	h    hash.Hash
	work chan []byte
	free chan []byte
}

const hashBuffers, hashBufferSize = 4, 256 << 10

func newHasher() *hasher {
	x := &hasher{h: sha256.New(), work: make(chan []byte, hashBuffers), free: make(chan []byte, hashBuffers)}
	for range hashBuffers {
		x.free <- make([]byte, hashBufferSize)
	}
	go func() {
		for b := range x.work {
			x.h.Write(b)
			x.free <- b[:cap(b)]
		}
	}()
	return x
}

func (x *hasher) buffer() []byte { return <-x.free }

// give hashes b, a buffer from buffer, and then takes it back.
func (x *hasher) give(b []byte) { x.work <- b }

// wait returns once every buffer given has been hashed.
func (x *hasher) wait() {
	var bufs [hashBuffers][]byte
	for i := range bufs {
		bufs[i] = <-x.free
	}
	for _, b := range bufs {
		x.free <- b
	}
}

func (x *hasher) sum() []byte {
	x.wait()
	return x.h.Sum(nil)
}

func (x *hasher) reset() {
	x.wait()
	x.h.Reset()
}

func (x *hasher) close() { close(x.work) }

// parseContentRange reads "bytes first-last/total".
func parseContentRange(s string) (first, last int64, ok bool) {
	s, ok = strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, false
	}
	r, _, _ := strings.Cut(s, "/")
	a, b, ok := strings.Cut(r, "-")
	if !ok {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first {
		return 0, 0, false
	}
	return first, last, true
}
