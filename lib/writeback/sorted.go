package writeback

import (
	"bytes"
	"cmp"
	"slices"
)

// Rows go into training_run_items and training_predictions in the order of
// the tables' keys, not of the files they come from: SQLite then adds to
// its B-trees at their right edge instead of all over them. A million
// items whose ids come in no sorted order took 28 s to record and 13 s to
// publish; sorted, 7 s and 4.5 s (BenchmarkPublish1M). The sorts are
// stable, so of two rows with the same key the later is written last, as
// the files have it.

// rawIDs holds the raw (JSON) instance_ids of one split file in one
// buffer, to insert in byte order of that JSON. Equal ids of one split
// make the same row in whichever order.
type rawIDs struct {
	buf  []byte
	ends []int
}

func (r *rawIDs) reset() { r.buf, r.ends = r.buf[:0], r.ends[:0] }

func (r *rawIDs) add(raw []byte) {
	r.buf = append(r.buf, raw...)
	r.ends = append(r.ends, len(r.buf))
}

// at returns the i-th id added.
func (r *rawIDs) at(i int32) []byte {
	start := 0
	if i > 0 {
		start = r.ends[i-1]
	}
	return r.buf[start:r.ends[i]]
}

// sorted returns the indexes of the ids in byte order of their JSON.
func (r *rawIDs) sorted() []int32 {
	idx := make([]int32, len(r.ends))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return bytes.Compare(r.at(a), r.at(b)) })
	return idx
}

// prelabelSet holds the prelabels of a publish, each id and payload in one
// buffer, to sort by (instance_id, schema_name): some 100 bytes a
// prelabel rather than the 200 of as many prelabel values.
type prelabelSet struct {
	buf     []byte
	rows    []prelabelRef
	schemas []string
	index   map[string]int32
}

type prelabelRef struct {
	off, idLen, payloadLen int
	schema                 int32
	hasConfidence          bool
	confidence             float64
}

func (s *prelabelSet) add(id, schema string, payload []byte, confidence any) {
	sc, ok := s.index[schema]
	if !ok {
		if s.index == nil {
			s.index = map[string]int32{}
		}
		sc = int32(len(s.schemas))
		s.index[schema] = sc
		s.schemas = append(s.schemas, schema)
	}
	r := prelabelRef{off: len(s.buf), idLen: len(id), payloadLen: len(payload), schema: sc}
	if c, ok := confidence.(float64); ok {
		r.hasConfidence, r.confidence = true, c
	}
	s.buf = append(append(s.buf, id...), payload...)
	s.rows = append(s.rows, r)
}

func (s *prelabelSet) id(r *prelabelRef) []byte { return s.buf[r.off : r.off+r.idLen] }

// sort orders the prelabels by instance_id, then schema name.
func (s *prelabelSet) sort() {
	slices.SortStableFunc(s.rows, func(a, b prelabelRef) int {
		return cmp.Or(bytes.Compare(s.id(&a), s.id(&b)), cmp.Compare(s.schemas[a.schema], s.schemas[b.schema]))
	})
}

// batches calls send with the prelabels in order, at most n at a time,
// those of the schemas in only when only is not nil. It returns how many
// it sent.
func (s *prelabelSet) batches(n int, only map[string]bool, send func([]prelabel) error) (int, error) {
	sent := 0
	batch := make([]prelabel, 0, n)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		sent += len(batch)
		err := send(batch)
		batch = make([]prelabel, 0, n)
		return err
	}
	for i := range s.rows {
		r := &s.rows[i]
		schema := s.schemas[r.schema]
		if only != nil && !only[schema] {
			continue
		}
		p := prelabel{id: string(s.id(r)), schema: schema,
			payload: string(s.buf[r.off+r.idLen : r.off+r.idLen+r.payloadLen])}
		if r.hasConfidence {
			p.confidence = r.confidence
		}
		if batch = append(batch, p); len(batch) == n {
			if err := flush(); err != nil {
				return sent, err
			}
		}
	}
	return sent, flush()
}

// countBySchema counts the prelabels of each schema.
func (s *prelabelSet) countBySchema() map[string]int {
	out := map[string]int{}
	for _, r := range s.rows {
		out[s.schemas[r.schema]]++
	}
	return out
}
