package project

import (
	"encoding/json"
	"testing"
)

// A text copied into the bundle as the data file has it (Source.RawText)
// must decode to what the bundle held when the text was decoded and
// written again by encoding/json. verbatimJSON says which may be copied;
// each that may decodes the same both ways.
func TestVerbatimJSON(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want bool
	}{
		{`"plain text"`, true},
		{`""`, true},
		{`"line\nbreak, \"quoted\", back\\slash, \/ and \t"`, true},
		{`"caf\u00e9 and \u0041"`, true},
		{`"<b>&amp;</b> as is"`, true},
		{"\"é, 日本, \u2028 raw\"", true},
		{`"an escaped backslash then text: \\ud800"`, true},
		{`"lone high surrogate \ud800 x"`, false},
		{`"lone low surrogate \uDC00"`, false},
		{`"a pair \ud83d\ude00 (taken the long way)"`, false},
		{"\"bad byte \xff here\"", false},
		{`7`, false},
	} {
		if got := verbatimJSON([]byte(c.raw)); got != c.want {
			t.Errorf("verbatimJSON(%s) = %v, want %v", c.raw, got, c.want)
			continue
		}
		if !c.want {
			continue
		}
		text, _ := jsonString([]byte(c.raw))
		again, err := json.Marshal(text)
		if err != nil {
			t.Fatal(err)
		}
		var direct, through string
		if err := json.Unmarshal([]byte(c.raw), &direct); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(again, &through); err != nil {
			t.Fatal(err)
		}
		if direct != through || direct != text {
			t.Errorf("%s: copied it reads %q, written again %q, decoded %q", c.raw, direct, through, text)
		}
	}
}
