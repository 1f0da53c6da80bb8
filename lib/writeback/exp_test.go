package writeback

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func BenchmarkExpInsert(b *testing.B) {
	for _, mode := range []string{"binds", "json_each", "binds-norowid", "json_each-norowid"} {
		s, _ := OpenStore(filepath.Join(b.TempDir(), "x.sqlite"))
		if strings.HasSuffix(mode, "norowid") {
			s.db.Exec(`DROP TABLE training_run_items; CREATE TABLE training_run_items (
	project TEXT NOT NULL, run_id TEXT NOT NULL, instance_id TEXT NOT NULL, split TEXT,
	PRIMARY KEY (project, run_id, instance_id)) WITHOUT ROWID`)
		}
		tx, _ := s.db.Begin()
		ins := newItemInserter(tx, "bench", "r1")
		st, err := tx.Prepare(`INSERT INTO training_run_items (project, run_id, instance_id, split) SELECT ?1, ?2, value, ?3 FROM json_each(?4) WHERE true ON CONFLICT (project, run_id, instance_id) DO UPDATE SET split = excluded.split`)
		if err != nil {
			b.Fatal(err)
		}
		items := make([]item, 0, 2048)
		var js []byte
		t0 := time.Now()
		for _, split := range []string{"train", "val", "test", "unlabeled"} {
			for i := 0; i < 300000; i++ {
				id := fmt.Sprintf("i%07d", i*4+len(split)%4)
				if strings.HasPrefix(mode, "binds") {
					items = append(items, item{id, split})
					if len(items) == 2048 {
						if err := ins.insert(items); err != nil {
							b.Fatal(err)
						}
						items = items[:0]
					}
				} else {
					if len(js) == 0 {
						js = append(js, '[')
					} else {
						js = append(js, ',')
					}
					js = append(js, '"')
					js = append(js, id...)
					js = append(js, '"')
					if len(js) > 20000 {
						js = append(js, ']')
						if _, err := st.Exec("bench", "r1", split, string(js)); err != nil {
							b.Fatal(err)
						}
						js = js[:0]
					}
				}
			}
			if len(js) > 0 {
				js = append(js, ']')
				st.Exec("bench", "r1", split, string(js))
				js = js[:0]
			}
		}
		ins.insert(items)
		ins.finish()
		t1 := time.Now()
		tx.Commit()
		var n int
		s.db.QueryRow("select count(*) from training_run_items").Scan(&n)
		b.Logf("%s: insert %d %v commit %v", mode, n, t1.Sub(t0), time.Since(t1))
		s.Close()
	}
}
