package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/memtest"
)

// hostileAllocBound is the most a hostile config may make the loader
// allocate, in all (docs/reliability.md): far above what a real config
// takes, far below what the attacks below would take unbounded (the
// backend alias bomb took 43 GB before aliasTrouble counted aliased nodes).
const hostileAllocBound = 64 << 20

// problemWith returns the first problem whose message holds want.
func problemWith(c *Config, want string) (Problem, bool) {
	for _, p := range c.Problems {
		if strings.Contains(p.Message, want) {
			return p, true
		}
	}
	return Problem{}, false
}

// TestAliasBombBackends is an alias bomb aimed at the decoder itself: one
// 2,000-key map, of an ssh backend with unknown keys, aliased as 2,000
// backends. The decoder judges an aliased node where it is used, so this
// 52 KB file made 4,000,000 problems; it is refused as a whole instead.
func TestAliasBombBackends(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &big\n  type: ssh\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "  k%d: 1\n", i)
	}
	b.WriteString("model_training:\n  backends:\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "    b%d: *big\n", i)
	}
	var c *Config
	n := memtest.Allocated(func() { c = ParseConfig([]byte(b.String()), "/proj") })
	p, ok := problemWith(c, "alias bomb")
	if !ok {
		t.Fatalf("no alias bomb problem; %d problems, first %v", len(c.Problems), c.Problems[:min(3, len(c.Problems))])
	}
	// The alias that passes the bound: each refers to the map's 4,003
	// nodes (2,001 keys, their values, the map), so the 25th, the backend
	// on line 2029 (the first is on line 2005), is the one.
	if p.Line != 2029 {
		t.Errorf("problem on line %d, want 2029: %v", p.Line, p)
	}
	if len(c.Problems) != 1 {
		t.Errorf("%d problems, want the one: %v", len(c.Problems), c.Problems[:min(3, len(c.Problems))])
	}
	if n > hostileAllocBound {
		t.Errorf("parsing allocated %d MB, bound %d MB", n>>20, hostileAllocBound>>20)
	}
}

// TestAliasBombBillionLaughs is the classic bomb, nine levels of nine
// aliases (387,420,489 strings), where the decoder expands a value in
// full (auto_retrain.params) and elsewhere.
func TestAliasBombBillionLaughs(t *testing.T) {
	levels := "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		levels += fmt.Sprintf("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	for _, tail := range []string{
		"model_training:\n  auto_retrain:\n    params: {x: *i}\n",
		"model_training:\n  backends: *i\n",
		"annotation_schemes: *i\ndata_files: *i\n",
	} {
		var c *Config
		n := memtest.Allocated(func() { c = ParseConfig([]byte(levels+tail), "/proj") })
		if _, ok := problemWith(c, "alias bomb"); !ok {
			t.Errorf("%q: no alias bomb problem: %v", tail, c.Problems)
		}
		if n > hostileAllocBound {
			t.Errorf("%q: parsing allocated %d MB, bound %d MB", tail, n>>20, hostileAllocBound>>20)
		}
	}
}

// TestAliasCycleRefused: yaml.v3 builds the node tree of an alias inside
// its own anchor, and following such an alias never ends (it overflowed
// the stack, which no recover catches; the fuzzer found it). Each shape is
// refused with one problem on the alias's line.
func TestAliasCycleRefused(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line       int
	}{
		{"map value", "model_training: &a {backends: *a}\n", 1},
		{"list item", "model_training:\n  backends: &a [x, *a]\n", 2},
		{"nested", "a: &a\n  b:\n    c: [1, {d: *a}]\nmodel_training:\n  enabled: true\n", 3},
		{"key", "model_training: &a {*a : 1}\n", 1},
		{"through another anchor", "x: &a {y: &b [*a], z: *b}\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ParseConfig([]byte(tc.text), "/proj")
			p, ok := problemWith(c, "refers to the node that contains it")
			if !ok {
				t.Fatalf("no cycle problem: %v", c.Problems)
			}
			if p.Line != tc.line || len(c.Problems) != 1 {
				t.Errorf("problems %v, want one on line %d", c.Problems, tc.line)
			}
		})
	}
}

// TestAliasesShared checks that ordinary sharing by alias is not taken
// for a bomb.
func TestAliasesShared(t *testing.T) {
	c := parse(t, `
shared: &env {HF_HOME: /data/hf, TOKENIZERS_PARALLELISM: "false"}
model_training:
  backends:
    a: {type: ssh, host: a, env: *env}
    b: {type: ssh, host: b, env: *env}
`)
	if len(c.Problems) != 0 {
		t.Fatalf("problems: %v", c.Problems)
	}
	if b, _ := c.Backend("b"); b.Env["HF_HOME"] != "/data/hf" {
		t.Errorf("b.env = %v", b.Env)
	}
}

func TestHostileConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"invalid UTF-8", "annotation_task_name: caf\xe9\nmodel_training:\n  enabled: true\n", "malformed YAML: invalid"},
		{"invalid UTF-8 in a key", "model_training:\n  \xff\xfe: 1\n", "malformed YAML: invalid"},
		{"deep nesting", strings.Repeat("[", 100_000), "malformed YAML: exceeded max depth"},
		{"deep nesting in maps", strings.Repeat("a: {", 50_000), "malformed YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *Config
			n := memtest.Allocated(func() { c = ParseConfig([]byte(tc.text), "/proj") })
			if _, ok := problemWith(c, tc.want); !ok {
				t.Errorf("no problem with %q: %v", tc.want, c.Problems)
			}
			if n > hostileAllocBound {
				t.Errorf("parsing allocated %d MB, bound %d MB", n>>20, hostileAllocBound>>20)
			}
		})
	}
}

// TestConfigTooLarge checks that a file over maxConfigBytes is refused
// unread, with a ReadError.
func TestConfigTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxConfigBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var rerr error
	n := memtest.Allocated(func() { _, rerr = ReadConfigFile(p) })
	if rerr == nil || !strings.Contains(rerr.Error(), "larger than 16 MiB") {
		t.Errorf("err = %v, want larger than 16 MiB", rerr)
	}
	// The read itself holds up to the limit and a byte: 16 MB and the
	// slice's growth.
	if n > hostileAllocBound {
		t.Errorf("reading allocated %d MB, bound %d MB", n>>20, hostileAllocBound>>20)
	}
}
