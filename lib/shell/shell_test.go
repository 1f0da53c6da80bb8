package shell

import (
	"os/exec"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "''"},
		{"plain", "plain"},
		{"/opt/conda/bin/python3", "/opt/conda/bin/python3"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"~/x", "'~/x'"},
		{"$HOME", "'$HOME'"},
		{"a;rm -rf /", "'a;rm -rf /'"},
		{"`id`", "'`id`'"},
		{"x=1", "'x=1'"},
		{"tab\there", "'tab\there'"},
		{"line\nbreak", "'line\nbreak'"},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := SingleQuote(`it's`); got != `'it'\''s'` {
		t.Errorf("SingleQuote(it's) = %s", got)
	}
	if got := SingleQuote("plain"); got != "'plain'" {
		t.Errorf("SingleQuote(plain) = %s", got)
	}
}

// TestQuoteRoundTrip has a real shell read each quoted word back.
func TestQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a b", "it's", "''", `"\'`, "$(id) `id` $HOME ~ *", "new\nline", "é ü 中"} {
		for _, q := range []func(string) string{Quote, SingleQuote} {
			out, err := exec.Command("sh", "-c", "printf '%s' "+q(s)).Output()
			if err != nil {
				t.Fatalf("sh: %v", err)
			}
			if string(out) != s {
				t.Errorf("sh read %q back as %q", s, out)
			}
		}
	}
}

func TestExpandHome(t *testing.T) {
	t.Setenv("HOME", "/home/ann/")
	for in, want := range map[string]string{
		"~": "/home/ann/", "~/": "/home/ann/", "~/.ssh/id": "/home/ann/.ssh/id",
		"/abs/~/id": "/abs/~/id", "~bob/cfg": "~bob/cfg", "": "", "x/~": "x/~",
	} {
		if got := ExpandHome(in); got != want {
			t.Errorf("ExpandHome(%q) = %q, want %q", in, got, want)
		}
	}
	t.Setenv("HOME", "")
	if got := ExpandHome("~/x"); got != "~/x" {
		t.Errorf("ExpandHome without $HOME = %q", got)
	}
}
