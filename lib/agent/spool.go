package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/atomicfile"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// The spool of a polling agent (SPEC G7: an outage or a server restart
// loses nothing): what a finished job still owes the server, kept in
// WORKDIR/spool/RUN/ until the server has acknowledged it, and sent again
// by an agent started later. Files, each removed once acknowledged:
//
//	events.jsonl       events not yet posted (only when the agent gave up)
//	predictions.jsonl  a hard link to (or copy of) the job's predictions
//	item.json          the result and what is needed to send it; last
const (
	spoolDir         = "spool"
	spoolItem        = "item.json"
	spoolEvents      = "events.jsonl"
	spoolPredictions = "predictions.jsonl"
)

// MsgTooLarge is the result's error, and the agent's log line, when the
// server refused the predictions with 413.
const MsgTooLarge = "the predictions (%s MB) are over the server's max_predictions_mb (%d MB): they stay on the agent's machine in %s"

// MsgTokenRefused is why a polling agent stops when the server refuses
// its claim with 401.
const MsgTokenRefused = "the server refused the token for backend %s: register again (potato training register %s CONFIG) and give this agent the new token"

// item is one spooled job.
type item struct {
	dir string
	// refused is set when the server refused the predictions or the
	// result for good (not a 413, whose message goes in the result).
	refused string
	// PredictionsPath is the job's own predictions file, named in the
	// result's error when the server refuses it.
	RunID            string `json:"run_id"`
	Backend          string `json:"backend"`
	RunToken         string `json:"run_token,omitempty"`
	MaxPredictionsMB int    `json:"max_predictions_mb,omitempty"`
	PredictionsPath  string `json:"predictions_path,omitempty"`
	// BundleSHA256 names the job's bundle in the cache, removed with the
	// item unless --keep.
	BundleSHA256 string            `json:"bundle_sha256,omitempty"`
	Result       agentproto.Result `json:"result"`
}

func spoolPath(workdir, runID string) string { return filepath.Join(workdir, spoolDir, runID) }

// newItem spools a finished job's result and its predictions file (pred,
// "" when there is none). item.json is written last: a directory without
// it was never complete and is removed on the next start.
func newItem(workdir string, it *item, pred string) error {
	it.dir = spoolPath(workdir, it.RunID)
	if err := os.MkdirAll(it.dir, 0o700); err != nil {
		return err
	}
	if pred != "" {
		dst := filepath.Join(it.dir, spoolPredictions)
		os.Remove(dst)
		if err := os.Link(pred, dst); err != nil {
			if err := copyFile(pred, dst); err != nil {
				return fmt.Errorf("spooling the predictions: %w", err)
			}
		}
		it.PredictionsPath = pred
	}
	return it.save()
}

// save writes item.json (mode 0600: it holds the run's token) by rename.
func (it *item) save() error {
	b, err := json.MarshalIndent(it, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(it.dir, spoolItem), append(b, '\n'), 0o600)
}

// addEvents appends evs and raw lines to events.jsonl, for a later start
// to post.
func (it *item) addEvents(evs []events.Event, raw [][]byte) error {
	if len(evs) == 0 && len(raw) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(it.dir, spoolEvents), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, e := range evs {
		w.Write(e.Line())
	}
	for _, l := range raw {
		w.Write(l)
		if len(l) == 0 || l[len(l)-1] != '\n' {
			w.WriteByte('\n')
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadSpool reads the spooled items of backend, oldest first. An
// incomplete directory (no item.json: the agent died while spooling,
// before anything was owed) is removed.
func loadSpool(o *Options) []*item {
	root := filepath.Join(o.Workdir, spoolDir)
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []*item
	for _, e := range ents {
		if !e.IsDir() || !rundir.ValidID(e.Name()) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, spoolItem))
		if errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(dir)
			continue
		}
		it := &item{dir: dir}
		if err != nil || json.Unmarshal(b, it) != nil || it.RunID != e.Name() {
			o.logf("spool: %s is unreadable; it is left as it is", dir)
			continue
		}
		if it.Backend != o.Backend {
			continue
		}
		out = append(out, it)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].RunID < out[k].RunID })
	return out
}

// deliverer sends one item, in order: its spooled events, its
// predictions, its result. Each step is done once acknowledged; an
// answer that another attempt cannot change is final for that step.
type deliverer struct {
	a  *state
	it *item
	// run is a client with the run's own token, which the run's dispatch
	// accepts even after the backend's token was replaced.
	run *agentproto.Client
	// beforeResult, when set, is called before the result is sent; false
	// puts the result off (events of the job are still to go first).
	beforeResult func() bool
}

func (s *state) deliverer(it *item) *deliverer {
	d := &deliverer{a: s, it: it, run: s.o.Client}
	if it.RunToken != "" {
		if c, err := s.o.Client.WithToken(it.RunToken); err == nil {
			d.run = c
		}
	}
	return d
}

// call makes one request with the run's token and, when that is refused
// (401), once more with the backend's.
func (d *deliverer) call(fn func(c *agentproto.Client) error) error {
	err := fn(d.run)
	if httpCode(err) == 401 && d.run != d.a.o.Client {
		err = fn(d.a.o.Client)
	}
	return err
}

// errPending is a step that failed but may succeed later.
var errPending = errors.New("not acknowledged yet")

// pendingError is errPending with the failure that caused it.
type pendingError struct{ cause error }

func (e *pendingError) Error() string   { return e.cause.Error() }
func (e *pendingError) Unwrap() error   { return e.cause }
func (e *pendingError) Is(t error) bool { return t == errPending }

// pendingCause is the failure behind an errPending, or nil.
func pendingCause(err error) error {
	var pe *pendingError
	if errors.As(err, &pe) {
		return pe.cause
	}
	return nil
}

// step makes one attempt at the next thing the item owes. It returns
// done once the item is delivered (or finally refused) and removed, or
// an error: errPending-wrapped when a later attempt may succeed.
func (d *deliverer) step(ctx context.Context) (done bool, err error) {
	it := d.it
	if evf := filepath.Join(it.dir, spoolEvents); exists(evf) {
		b, err := os.ReadFile(evf)
		if err != nil {
			return false, err
		}
		var raw [][]byte
		for _, l := range strings.SplitAfter(string(b), "\n") {
			if strings.TrimSpace(l) != "" {
				raw = append(raw, []byte(l))
			}
		}
		cctx, cancel := context.WithTimeout(ctx, postTimeout)
		err = d.call(func(c *agentproto.Client) error {
			_, err := c.PostEvents(cctx, it.RunID, nil, raw)
			return err
		})
		cancel()
		if err != nil && retryable(err) {
			return false, &pendingError{err}
		}
		if err != nil {
			d.a.o.logf("run %s: the server refused its spooled events: %v", it.RunID, err)
		} else {
			d.a.heard()
		}
		os.Remove(evf)
	}
	if pf := filepath.Join(it.dir, spoolPredictions); exists(pf) {
		size := fileSize(pf)
		cctx, cancel := context.WithTimeout(ctx, uploadTimeout(size))
		err := d.call(func(c *agentproto.Client) error { return c.UploadPredictions(cctx, it.RunID, pf) })
		cancel()
		if err != nil && retryable(err) {
			return false, &pendingError{err}
		}
		switch {
		case errors.Is(err, agentproto.ErrTooLarge):
			msg := fmt.Sprintf(MsgTooLarge, megabytes(size), it.MaxPredictionsMB, it.PredictionsPath)
			d.a.o.logf("run %s: %s", it.RunID, msg)
			if it.Result.Error != "" {
				msg = it.Result.Error + "; " + msg
			}
			it.Result.Error = msg
			// The code stays the job's own when it has one: what ended
			// it comes first.
			if it.Result.Code == "" {
				it.Result.Code = agentproto.CodeUploadRefused
			}
			if err := it.save(); err != nil {
				return false, err
			}
		case err != nil:
			it.refused = fmt.Sprintf("the server refused the predictions: %v", err)
			d.a.o.logf("run %s: %s", it.RunID, it.refused)
		default:
			d.a.heard()
		}
		os.Remove(pf)
	}
	if d.beforeResult != nil && !d.beforeResult() {
		return false, errPending
	}
	cctx, cancel := context.WithTimeout(ctx, postTimeout)
	err = d.call(func(c *agentproto.Client) error { return c.PostResult(cctx, it.RunID, it.Result) })
	cancel()
	switch code := httpCode(err); {
	case err == nil || code == 409:
		// 409: the result is in already, from an attempt whose answer
		// was lost.
		d.a.heard()
	case retryable(err):
		return false, &pendingError{err}
	default:
		it.refused = fmt.Sprintf("the server refused the result: %v", err)
		d.a.o.logf("run %s: the server refused the result, which is dropped from the spool: %v", it.RunID, err)
	}
	if err := os.RemoveAll(it.dir); err != nil {
		return false, err
	}
	if it.BundleSHA256 != "" && !d.a.o.Keep {
		os.Remove(cachedBundle(d.a.o.Workdir, it.BundleSHA256))
	}
	return true, nil
}

// resendSpool makes one attempt at each spooled item of this backend; an
// item not acknowledged stays for the next call.
func (s *state) resendSpool(ctx context.Context) {
	for _, it := range loadSpool(&s.o) {
		if ctx.Err() != nil {
			return
		}
		if !s.spoolSeen[it.RunID] {
			s.spoolSeen[it.RunID] = true
			s.o.logf("run %s: sending what it still owes the server (spooled in %s)", it.RunID, it.dir)
		}
		done, err := s.deliverer(it).step(ctx)
		switch {
		case done:
			s.o.logf("run %s: the server has its result", it.RunID)
		case errors.Is(err, errPending):
			s.pendingFail(it.RunID, "resending the spooled result", err)
		case err != nil:
			s.o.logf("run %s: spool: %v", it.RunID, err)
		}
	}
}

// pendingFail logs a step that will be tried again: as an outage when
// the server was not reached, else (it answered, say, 502) once for each
// new answer, so that an agent whose claims reach the server does not log
// each attempt.
func (s *state) pendingFail(runID, what string, err error) {
	cause := pendingCause(err)
	if cause == nil {
		return
	}
	if httpCode(cause) == 0 {
		s.out.fail(fmt.Sprintf("run %s: %s", runID, what), cause)
		return
	}
	s.mu.Lock()
	seen := s.lastAnswer[runID] == cause.Error()
	s.lastAnswer[runID] = cause.Error()
	s.mu.Unlock()
	if !seen {
		s.o.logf("run %s: %s: %v; trying again", runID, what, cause)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// megabytes is n bytes in MB (2^20), with decimals below 10.
func megabytes(n int64) string {
	mb := float64(n) / (1 << 20)
	if mb < 0.1 {
		return fmt.Sprintf("%.3f", mb)
	}
	if mb < 10 {
		return fmt.Sprintf("%.1f", mb)
	}
	return fmt.Sprintf("%.0f", mb)
}

// copyFile copies src to dst by the rename of a whole temporary file.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return agentproto.StoreFile(dst, in)
}

// touch marks a cached file as used now.
func touch(p string) {
	now := time.Now()
	os.Chtimes(p, now, now)
}
