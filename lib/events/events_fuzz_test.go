package events

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that every refusal wraps
// ErrNotEvent, and that an event it accepts re-encodes: Line gives a line
// that Parse reads back as the same event (t to the millisecond), and
// encoding that again gives the same bytes.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"event":"progress","t":1.5,"phase":"fit","current":2,"total":10}`,
		`{"v":1,"event":"log","t":1764683701.25,"level":"info","msg":"caf\u00e9 \ud800"}`,
		`{"v":1,"event":"result","t":0,"status":"finished","metrics":{"accuracy":0.9},"label_order":{"s":["a","b"]}}`,
		`{"v":1,"event":"error","code":"fit_failed","message":"x","install_hint":""}`,
		`{"v":1.0,"event":"metric","t":-1e308,"value":1e-320,"step":3}`,
		`{"v":1,"event":"artifact","t":1e300,"path":"model.bin","bytes":123456789012}`,
		`{"v":1,"event":"status","t":"now","state":"fitting","v":1}`,
		`{"v":1,"event":"log","msg":"a","msg":"b"}`,
		`{"v":1,"event":"log","x":[[[[[[{}]]]]]]}`,
		`{"v":2,"event":"log"}`, `{"v":1,"event":"teleport"}`, `{"v":1}`, `[1]`, `plain text`, ``,
		"{\"v\":1,\"event\":\"log\",\"msg\":\"\xff\"}",
		`{"v":1,"event":"log","t":1}` + "\r\n",
		`{"v":1,"event":"log","t":1} {"v":1}`,
		"{" + strings.Repeat(`"a":[`, 20) + strings.Repeat("]", 20) + "}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := Parse(line)
		if err != nil {
			if !errors.Is(err, ErrNotEvent) {
				t.Fatalf("Parse(%q): %v does not wrap ErrNotEvent", line, err)
			}
			return
		}
		if !known[e.Kind] {
			t.Fatalf("Parse(%q): unknown kind %q accepted", line, e.Kind)
		}
		for _, k := range []string{"v", "event", "t"} {
			if _, ok := e.Fields[k]; ok {
				t.Fatalf("Parse(%q): %q kept among the fields", line, k)
			}
		}
		b, err := e.MarshalJSON()
		if err != nil {
			t.Fatalf("Parse(%q) gave an event that does not encode: %v", line, err)
		}
		out := e.Line()
		if !bytes.Equal(out, append(b, '\n')) || bytes.Count(out, []byte("\n")) != 1 {
			t.Fatalf("Line of %q is %q, not one line", line, out)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(%q) ok, its re-encoding %q is refused: %v", line, out, err)
		}
		if back.Kind != e.Kind || !reflect.DeepEqual(back.Fields, e.Fields) {
			t.Fatalf("Parse(%q) = %+v, re-encoded %q reads %+v", line, e, out, back)
		}
		// t is written to the millisecond: the re-read t is within half of
		// one of the original, give or take the two roundings to float64
		// (at 1.7e7 s, 0.0735 came back 0.0005000010 away).
		ulp := math.Nextafter(math.Abs(e.T), math.Inf(1)) - math.Abs(e.T)
		if d := math.Abs(back.T - e.T); d > 0.0005+2*ulp {
			t.Fatalf("Parse(%q): t %v re-encodes as %v", line, e.T, back.T)
		}
		if again := back.Line(); !bytes.Equal(again, out) {
			t.Fatalf("re-encoding is not stable: %q then %q", out, again)
		}
	})
}
