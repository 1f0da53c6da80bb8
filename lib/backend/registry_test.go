package backend_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"potato-training/lib/backend"
	_ "potato-training/lib/backend/all"
	"potato-training/lib/check"
	"potato-training/lib/config"
)

// Every type is registered once with all its fields; the types that an
// entry of model_training.backends may have are exactly config's, each
// with config's key table; the local backend alone runs on the server and
// has no entry.
func TestRegistry(t *testing.T) {
	types := backend.Types()
	var names []string
	for _, d := range types {
		names = append(names, d.Name)
	}
	if want := []string{"agent", "local", "slurm", "ssh"}; !slices.Equal(names, want) {
		t.Fatalf("registered types %q, want %q", names, want)
	}
	var entryTypes []string
	for _, bt := range config.BackendTypes {
		entryTypes = append(entryTypes, bt.Name)
	}
	onServer, tokens := 0, 0
	for _, d := range types {
		if d.New == nil || d.Check == nil || d.Label == nil {
			t.Errorf("%s: constructor, check or label missing", d.Name)
		}
		if d.OnServer {
			onServer++
			if d.Keys != nil || d.Validate != nil || slices.Contains(entryTypes, d.Name) {
				t.Errorf("%s: the backend on the server has no entry, so no keys and no validation of its own", d.Name)
			}
			continue
		}
		if d.Tokens {
			tokens++
		}
		if d.Validate == nil || len(d.Keys) == 0 {
			t.Errorf("%s: validation or keys missing", d.Name)
		}
		if !slices.Contains(entryTypes, d.Name) {
			t.Errorf("%s: config does not accept it as an entry's type", d.Name)
		}
		if got, want := d.Keys, config.KeysFor(d.Name); len(got) == 0 || &got[0] != &want[0] || len(got) != len(want) {
			t.Errorf("%s: its keys are not config's table for it", d.Name)
		}
	}
	if onServer != 1 || tokens != 1 {
		t.Errorf("%d types on the server and %d with tokens, want one each", onServer, tokens)
	}
	for _, n := range entryTypes {
		if _, ok := backend.Lookup(n); !ok {
			t.Errorf("config accepts type %s, which no package registers", n)
		}
	}
	if _, ok := backend.Lookup("ftp"); ok {
		t.Error("an unknown type is found")
	}
}

// A second type of a name, or one without its constructor, is refused at
// once.
func TestRegisterRefuses(t *testing.T) {
	d := *backend.Of(config.LocalBackend)
	for name, bad := range map[string]backend.Descriptor{
		"twice":          d,
		"no constructor": {Name: "x-no-new", Check: d.Check, Label: d.Label},
		"no check":       {Name: "x-no-check", New: d.New, Label: d.Label},
		"no label":       {Name: "x-no-label", New: d.New, Check: d.Check},
		"no name":        {New: d.New, Check: d.Check, Label: d.Label},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered", name)
				}
			}()
			backend.Register(bad)
		}()
	}
	if len(backend.Types()) != 4 {
		t.Errorf("%d types after the refusals", len(backend.Types()))
	}
}

// The labels of the "Runs on" menu and run.json's ran_on (SPEC A1).
func TestLabels(t *testing.T) {
	c := config.ParseConfig([]byte(`
model_training:
  backends:
    gpu: {type: ssh, host: g}
    cluster: {type: slurm, host: l, remote_dir: /shared/x}
    lab: {type: agent}
`), t.TempDir())
	if len(c.Problems) != 0 {
		t.Fatalf("problems: %v", c.Problems)
	}
	for name, want := range map[string]string{
		"gpu": "gpu (ssh to g)", "cluster": "cluster (slurm via l)", "lab": "lab (agent)", "local": "local (this machine)",
	} {
		b, _ := c.Backend(name)
		if got := backend.Label(b); got != want {
			t.Errorf("label %q, want %q", got, want)
		}
	}
}

// An unknown type, which the config never gives, is checked as one this
// version cannot check rather than as another type.
func TestCheckUnknownType(t *testing.T) {
	r := backend.Check(context.Background(), check.Input{Backend: &config.Backend{Name: "x", Type: "ftp"}})
	if r.OK || len(r.Problems) != 1 || r.Problems[0] != "checking ftp backends is not available in this version" {
		t.Errorf("%+v", r)
	}
}

// Each type's package asserts at compile time that its backend implements
// Backend.
func TestEveryPackageAssertsBackend(t *testing.T) {
	assert := regexp.MustCompile(`(?m)^var _ backend\.Backend = \(\*[A-Za-z.]+\)\(nil\)`)
	dirs, err := filepath.Glob("*/register.go")
	if err != nil || len(dirs) != len(backend.Types()) {
		t.Fatalf("register.go files: %q, %v", dirs, err)
	}
	for _, p := range dirs {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !assert.Match(src) || !strings.Contains(string(src), "backend.Register(") {
			t.Errorf("%s registers no descriptor or does not assert that its backend implements Backend", p)
		}
	}
}
