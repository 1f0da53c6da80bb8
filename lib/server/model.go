package server

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/events"
	"potato-training/lib/report"
	"potato-training/lib/rundir"
)

// maxSeriesPoints bounds the points of one metric series (a split and a
// name) that GET /runs/<id> gives: a longer series keeps every second,
// fourth, eighth... event, the fewest that leave at most maxSeriesPoints,
// and its last, so that a chart of a long run stays small and even.
const maxSeriesPoints = 2000

// maxRunPoints bounds the points of all a run's series together: a run of
// many series keeps fewer of each, as even as maxSeriesPoints keeps them,
// so that its answer stays small (some 64000 points, 5 MB of JSON, for
// events.MaxSeries series of any length).
const maxRunPoints = 32 * maxSeriesPoints

// maxMetricRuns is how many runs' metric events the server keeps read.
const maxMetricRuns = 32

// metricEvent is one metric event of a run, as the page's charts draw it.
type metricEvent struct {
	Split string  `json:"split"`
	Name  string  `json:"name"`
	Step  float64 `json:"step"`
	Value float64 `json:"value"`
}

type seriesKey struct{ split, name string }

// metricPoint is a metric event of a series: seq orders the events of a
// run as written, i the series' own count.
type metricPoint struct {
	seq, i      int64
	step, value float64
}

// series keeps every stride-th point of a series (i a multiple of
// stride, a power of 2), at most its run's limit, and its last: an even
// subsample whatever the series' length, in bounded memory.
type series struct {
	n      int64
	stride int64
	pts    []metricPoint
	last   metricPoint
}

func (s *series) add(p metricPoint, limit int) {
	p.i = s.n
	s.n++
	s.last = p
	if s.stride == 0 {
		s.stride = 1
	}
	if p.i%s.stride != 0 {
		return
	}
	s.pts = append(s.pts, p)
	s.thin(limit)
}

// thin doubles the stride until at most limit points are kept.
func (s *series) thin(limit int) {
	if len(s.pts) <= limit {
		return
	}
	for len(s.pts) > limit {
		s.stride *= 2
		kept := s.pts[:0]
		for _, q := range s.pts {
			if q.i%s.stride == 0 {
				kept = append(kept, q)
			}
		}
		s.pts = kept
	}
	if cap(s.pts) > 4*limit {
		s.pts = slices.Clone(s.pts) // the memory of the points dropped too
	}
}

// points are the kept points and the last.
func (s *series) points() []metricPoint {
	if len(s.pts) > 0 && s.pts[len(s.pts)-1].i == s.last.i {
		return s.pts
	}
	return append(s.pts[:len(s.pts):len(s.pts)], s.last)
}

// metricRead is what has been read of one run's events: the file, how
// far, and its series.
type metricRead struct {
	file    os.FileInfo
	archive bool
	offset  int64
	seq     int64
	series  map[seriesKey]*series
	// limit is the points each series keeps: maxSeriesPoints, less when
	// there are more series than maxRunPoints allows at that.
	limit int
	used  time.Time
}

// metricCache keeps, for the runs last asked for, what metricEvents read
// of their events, so that a poll of a run under way reads only the lines
// added since, and a finished run's events are read once.
type metricCache struct {
	mu   sync.Mutex
	runs map[string]*metricRead
}

// metricEvents gives every metric event of the run id in dir, from
// events.jsonl or its archive, in the order written: those of its first
// events.MaxSeries series, each thinned as maxSeriesPoints and
// maxRunPoints say. A line that is no metric event with a numeric step
// and value is skipped, and so is, until it is whole, a last line not yet
// ended by a newline.
func (c *metricCache) metricEvents(id, dir string) ([]metricEvent, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, archive, err := openEvents(dir)
	if errors.Is(err, fs.ErrNotExist) {
		delete(c.runs, id)
		return []metricEvent{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r := c.runs[id]
	fresh := r == nil || r.archive != archive || !os.SameFile(r.file, fi) || fi.Size() < r.offset ||
		archive && (fi.Size() != r.file.Size() || !fi.ModTime().Equal(r.file.ModTime()))
	if fresh {
		r = &metricRead{archive: archive, series: map[seriesKey]*series{}, limit: maxSeriesPoints}
	}
	r.file, r.used = fi, time.Now()
	if fresh || !archive {
		if err := r.read(f, archive); err != nil {
			return nil, err
		}
	}
	if c.runs == nil {
		c.runs = map[string]*metricRead{}
	}
	c.runs[id] = r
	c.evict()
	return r.events(), nil
}

// evict forgets the runs asked for least recently beyond maxMetricRuns.
func (c *metricCache) evict() {
	for len(c.runs) > maxMetricRuns {
		var oldest string
		for id, r := range c.runs {
			if oldest == "" || r.used.Before(c.runs[oldest].used) {
				oldest = id
			}
		}
		delete(c.runs, oldest)
	}
}

// eventsFile is what rundir.OpenEvents opens.
type eventsFile interface {
	io.ReadCloser
	Stat() (fs.FileInfo, error)
}

// openEvents opens events.jsonl, or else the archive uncompressed; archive
// says which.
func openEvents(dir string) (f eventsFile, archive bool, err error) {
	rc, err := rundir.OpenEvents(dir)
	if err != nil {
		return nil, false, err
	}
	_, plain := rc.(*os.File)
	return rc.(eventsFile), !plain, nil
}

// read reads f from r.offset (events.jsonl; the archive from its start)
// to its last whole line.
func (r *metricRead) read(f eventsFile, archive bool) error {
	if !archive && r.offset > 0 {
		if _, err := f.(io.Seeker).Seek(r.offset, io.SeekStart); err != nil {
			return err
		}
	}
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && (err == nil || archive) {
			r.offset += int64(len(line))
			r.add(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (r *metricRead) add(line []byte) {
	var e struct {
		Event string   `json:"event"`
		Split string   `json:"split"`
		Name  string   `json:"name"`
		Step  *float64 `json:"step"`
		Value *float64 `json:"value"`
	}
	if json.Unmarshal(line, &e) != nil || e.Event != "metric" || e.Step == nil || e.Value == nil {
		return
	}
	k := seriesKey{e.Split, e.Name}
	s := r.series[k]
	if s == nil {
		// The series the dispatch keeps (events.MaxSeries), and no more
		// of a file it did not write so.
		if len(r.series) >= events.MaxSeries || len(e.Split) > events.MaxMetricName || len(e.Name) > events.MaxMetricName {
			return
		}
		s = &series{}
		r.series[k] = s
		if l := min(maxSeriesPoints, maxRunPoints/len(r.series)); l < r.limit {
			for _, o := range r.series {
				o.thin(l)
			}
			r.limit = l
		}
	}
	s.add(metricPoint{seq: r.seq, step: *e.Step, value: *e.Value}, r.limit)
	r.seq++
}

// events are the series' points in the order written.
func (r *metricRead) events() []metricEvent {
	type ev struct {
		seq int64
		e   metricEvent
	}
	var all []ev
	for k, s := range r.series {
		for _, p := range s.points() {
			all = append(all, ev{p.seq, metricEvent{Split: k.split, Name: k.name, Step: p.step, Value: p.value}})
		}
	}
	slices.SortFunc(all, func(a, b ev) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]metricEvent, len(all))
	for i, x := range all {
		out[i] = x.e
	}
	return out
}

// acceptance is GET /report: potato-dispatch report --json's answer, for
// the page's panel; ?run= and ?schema= narrow it as --run and --schema do.
func (a *api) acceptance(w http.ResponseWriter, r *http.Request, _ []string) {
	q := r.URL.Query()
	opt := report.Options{RunID: q.Get("run"), Schema: q.Get("schema")}
	if opt.RunID != "" && !rundir.ValidID(opt.RunID) {
		a.fail(w, errorf(http.StatusNotFound, "no run %q", opt.RunID))
		return
	}
	if _, ok := a.s.Config.Scheme(opt.Schema); opt.Schema != "" && !ok {
		a.fail(w, errorf(http.StatusBadRequest, "schema %q is not in annotation_schemes of the config", opt.Schema))
		return
	}
	rep, err := report.BuildAcceptance(a.s.Config, opt)
	if errors.Is(err, report.ErrNoStore) {
		a.fail(w, errorf(http.StatusNotFound, "%v", err))
		return
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	agentproto.WriteJSON(w, http.StatusOK, rep)
}
