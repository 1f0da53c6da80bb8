package trainer

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzReadSpec reads arbitrary bytes as spec.json. It must not panic; an
// error names the file; a spec it accepts has what ReadSpec promises and
// reads back the same once written. The same bytes taken as a result's
// predictions_file never name a file outside the workdir.
func FuzzReadSpec(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"run_id":"r1","trainer":"tfidf-logreg","schemas":[{"name":"s","annotation_type":"radio","kind":"nominal","labels":["a","b"],"source_field":""}],"bundle_dir":"/b","workdir":"/w","params":{"c":"1"},"seed":7,"limits":{"max_wall_s":60,"max_ram_mb":512,"device":"cpu","num_threads":2}}`,
		`{"v":2}`, `{"v":1,"trainer":"x","schemas":[],"bundle_dir":"/b","workdir":"/w"}`, `{"v":1,"trainer":"x","schemas":[{}],"bundle_dir":"","workdir":"/w"}`,
		`{"v":1.5}`, `{"v":1,"seed":1e99}`, `{"v":1,"params":{"a":1}}`, `null`, `[]`, `{"v":1,"trainer":"x","schemas":[{"labels":null}],"bundle_dir":"b","workdir":"w"}`,
		`../../etc/passwd`, `/etc/passwd`, `/w/../../etc/passwd`, `predictions.jsonl`, ``,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if p := PredictionsPath("/w", string(b)); p != "/w" && !strings.HasPrefix(p, "/w/") {
			t.Fatalf("predictions_file %q is read from %s", b, p)
		}
		path := filepath.Join(dir, "spec.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := ReadSpec(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("%q: error %q does not name the file", b, err)
			}
			return
		}
		if s.V != 1 || s.Trainer == "" || len(s.Schemas) == 0 || s.BundleDir == "" || s.Workdir == "" {
			t.Fatalf("%q: accepted %+v", b, s)
		}
		again := filepath.Join(dir, "again.json")
		if err := s.Write(again); err != nil {
			t.Fatalf("%q: the spec read does not write: %v", b, err)
		}
		back, err := ReadSpec(again)
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("%q: read %+v, written and read back %+v (%v)", b, s, back, err)
		}
	})
}
