package sshx

import (
	"reflect"
	"testing"
)

func TestParseProgress2(t *testing.T) {
	for _, tc := range []struct {
		line string
		done int64
		pct  int
		ok   bool
	}{
		{"  120,586,240  36%   50.21MB/s    0:00:04", 120586240, 36, true},
		{"              0   0%    0.00kB/s    0:00:00  ", 0, 0, true},
		{"      3,000,000   4%    1.02MB/s    0:00:02 (xfr#1, to-chk=2/6)", 3000000, 4, true},
		{"  1,500,002 100%  118.57MB/s    0:00:00 (xfr#2, to-chk=0/4)", 1500002, 100, true},
		{"  1.234.567  12%    1,00MB/s    0:00:01", 1234567, 12, true}, // a locale writing . between thousands
		{"  1'234'567  12%    1.00MB/s    0:00:01", 1234567, 12, true},
		{"987 100%", 987, 100, true},
		{"sending incremental file list", 0, 0, false},
		{"rsync: [sender] change_dir \"/x\" failed: No such file or directory (2)", 0, 0, false},
		{"", 0, 0, false},
		{"12,0 34 %", 0, 0, false},
	} {
		done, pct, ok := parseProgress2(tc.line)
		if ok != tc.ok || ok && (done != tc.done || pct != tc.pct) {
			t.Errorf("parseProgress2(%q) = %d, %d, %v; want %d, %d, %v", tc.line, done, pct, ok, tc.done, tc.pct, tc.ok)
		}
	}
}

// TestLineWriter feeds rsync's real output, cut at awkward places.
func TestLineWriter(t *testing.T) {
	raw := "\r              0   0%    0.00kB/s    0:00:00  \r      1,114,112   1%  995.43kB/s    0:01:02  " +
		"\r      3,000,003   4%    1.02MB/s    0:00:02 (xfr#2, to-chk=0/6)\n"
	for _, size := range []int{1, 3, 7, 64, len(raw)} {
		var got []int64
		w := &lineWriter{line: func(l string) {
			if d, _, ok := parseProgress2(l); ok {
				got = append(got, d)
			}
		}}
		for i := 0; i < len(raw); i += size {
			w.Write([]byte(raw[i:min(i+size, len(raw))]))
		}
		w.flush()
		if want := []int64{0, 1114112, 3000003}; !reflect.DeepEqual(got, want) {
			t.Errorf("chunks of %d: got %v, want %v", size, got, want)
		}
	}
}

func TestLineWriterFlushesLastLine(t *testing.T) {
	var got []string
	w := &lineWriter{line: func(l string) { got = append(got, l) }}
	w.Write([]byte("a\rb"))
	w.flush()
	if !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("got %q", got)
	}
}

func TestProgressTotal(t *testing.T) {
	for _, tc := range []struct {
		done  int64
		pct   int
		total int64
		want  int64
	}{
		{500, 50, 1000, 1000},   // measured total wins
		{500, 50, -1, 1000},     // estimated from the percentage
		{0, 0, -1, -1},          // unknown yet
		{1200, 100, 1000, 1200}, // files grew since they were measured
	} {
		if got := progressTotal(tc.done, tc.pct, tc.total); got != tc.want {
			t.Errorf("progressTotal(%d, %d, %d) = %d, want %d", tc.done, tc.pct, tc.total, got, tc.want)
		}
	}
}
