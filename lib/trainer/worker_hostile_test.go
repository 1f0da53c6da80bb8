package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testcli"
	"potato-training/lib/config"
	"potato-training/lib/events"
)

// TestWorkerManifestOutsideBundle is a bundle from a hostile far side: its
// manifest names, as a split, a file of the machine the worker runs on
// (by "../", by an absolute path, and as a split file that is a symlink
// out of the bundle), whose ids would come back in the predictions. The
// real worker process (potato-agent worker, as an agent runs it) refuses
// the bundle with bad_bundle, and none of the file's ids is in anything it
// writes.
func TestWorkerManifestOutsideBundle(t *testing.T) {
	bin := testcli.Binaries(t)
	for _, tc := range []struct {
		name string
		path func(secret string) string
		link bool
	}{
		{"dot dot", func(string) string { return "../secret.jsonl" }, false},
		{"absolute", func(secret string) string { return secret }, false},
		{"symlink", func(string) string { return "test.jsonl" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := writeBundle(t, config.KindNominal, 60, nil)
			secret := filepath.Join(filepath.Dir(spec.BundleDir), "secret.jsonl")
			var rows bytes.Buffer
			for i := 0; i < 20; i++ {
				json.NewEncoder(&rows).Encode(map[string]any{"instance_id": "SECRET-" + string(rune('a'+i)), "text": "the private file", "targets": map[string]any{}})
			}
			if err := os.WriteFile(secret, rows.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			mpath := filepath.Join(spec.BundleDir, "manifest.json")
			var m map[string]any
			b, err := os.ReadFile(mpath)
			if err != nil || json.Unmarshal(b, &m) != nil {
				t.Fatalf("manifest: %v", err)
			}
			m["splits"].(map[string]any)["test"].(map[string]any)["path"] = tc.path(secret)
			b, _ = json.Marshal(m)
			if err := os.WriteFile(mpath, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.link {
				os.Remove(filepath.Join(spec.BundleDir, "test.jsonl"))
				if err := os.Symlink("../secret.jsonl", filepath.Join(spec.BundleDir, "test.jsonl")); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(filepath.Join(bin, "potato-agent"), "worker", "--spec", writeSpec(t, spec))
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != events.ExitBadSpec {
				t.Fatalf("worker: %v, want exit %d\n%s", err, events.ExitBadSpec, stderr.String())
			}
			evs := parseEvents(t, stdout.Bytes())
			last := evs[len(evs)-1]
			if last.Kind != events.KindError || last.String("code") != events.CodeBadBundle || !strings.Contains(last.String("message"), "leaves the bundle directory") {
				t.Errorf("last event %v, want bad_bundle: leaves the bundle directory", last)
			}
			if strings.Contains(stdout.String(), "SECRET-") {
				t.Errorf("the events name the file's ids:\n%s", stdout.String())
			}
			filepath.Walk(spec.Workdir, func(p string, info os.FileInfo, err error) error {
				if err == nil && !info.IsDir() {
					if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("SECRET-")) {
						t.Errorf("%s holds the file's ids", p)
					}
				}
				return nil
			})
		})
	}
}
