package validate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Every config of Potato's own example projects validates without errors:
// their many keys belong to Potato (SPEC V6).
func TestPotatoExamples(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "potato-examples")
	n := 0
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() || filepath.Ext(p) != ".yaml" || !isConfig(p) {
			return nil
		}
		n++
		_, r, err := File(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if len(r.Errors) > 0 || len(r.Warnings) > 0 {
			t.Errorf("%s: %+v", p, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found only %d example configs under %s", n, root)
	}
}

func isConfig(p string) bool {
	data, err := os.ReadFile(p)
	return err == nil && (bytes.Contains(data, []byte("annotation_schemes")) || bytes.Contains(data, []byte("annotation_task_name")))
}

// A trusted proxy prefix that covers more than a private network is a
// warning, named with what it covers: IPv4 shorter than /8, IPv6 shorter
// than /16 outside fc00::/7. Narrower prefixes and addresses are quiet.
func TestTrustedProxiesTooWide(t *testing.T) {
	for _, c := range []struct {
		entry, want string // want: what the warning says it covers; "" none
	}{
		{"0.0.0.0/0", "every IPv4 address"},
		{"::/0", "every IPv6 address"},
		{"128.0.0.0/1", "every IPv4 address in a /1"},
		{"10.0.0.0/7", "every IPv4 address in a /7"},
		{"2000::/3", "every IPv6 address in a /3"},
		{"2001:db8::/15", "every IPv6 address in a /15"},
		{"::ffff:0.0.0.0/0", "every IPv6 address"},
		{"10.0.0.0/8", ""},
		{"172.16.0.0/12", ""},
		{"192.0.2.7", ""},
		{"2001:db8::/16", ""},
		{"fc00::/7", ""},
		{"fd00::/8", ""},
		{"::1", ""},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "config.yaml")
		yaml := "annotation_task_name: t\nmodel_training:\n  trusted_proxies: [\"" + c.entry + "\"]\n"
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, r, err := File(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Errors) != 0 {
			t.Errorf("%s: errors %+v", c.entry, r.Errors)
		}
		if c.want == "" {
			if len(r.Warnings) != 0 {
				t.Errorf("%s: warnings %+v, want none", c.entry, r.Warnings)
			}
			continue
		}
		want := fmt.Sprintf(proxyTooWide, c.entry, c.want)
		if len(r.Warnings) != 1 || r.Warnings[0].Message != want || r.Warnings[0].Line != 3 || r.Warnings[0].Key != "model_training.trusted_proxies" {
			t.Errorf("%s: warnings %+v, want one on line 3: %s", c.entry, r.Warnings, want)
		}
	}
}
