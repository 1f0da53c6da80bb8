package events

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"potato-training/internal/memtest"
)

// hostileAllocBound is the most one hostile line may make Parse allocate
// (docs/reliability.md).
const hostileAllocBound = 64 << 20

// TestParseHostile checks that a line too long, not UTF-8 or nested too
// deeply is not an event (the relay keeps it as log), with a reason, and
// that refusing it stays within hostileAllocBound.
func TestParseHostile(t *testing.T) {
	long := append([]byte(`{"v":1,"event":"log","t":1,"msg":"`), bytes.Repeat([]byte("x"), 10<<20)...)
	long = append(long, `"}`...)
	for _, tc := range []struct {
		name string
		line []byte
		want string
	}{
		{"10 MB line", long, "longer than 1048576 bytes"},
		{"invalid UTF-8 in a string", []byte("{\"v\":1,\"event\":\"log\",\"t\":1,\"msg\":\"caf\xe9\"}"), "not valid UTF-8"},
		{"invalid UTF-8 in a key", []byte("{\"v\":1,\"event\":\"log\",\"\xff\":1}"), "not valid UTF-8"},
		{"truncated UTF-8", []byte("{\"v\":1,\"event\":\"log\",\"msg\":\"\xe2\x82\"}"), "not valid UTF-8"},
		{"nested 100,000 deep", []byte(`{"v":1,"event":"log","x":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + "}"), "exceeded max depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := memtest.Allocated(func() { _, err = Parse(tc.line) })
			if !errors.Is(err, ErrNotEvent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrNotEvent and %q", err, tc.want)
			}
			if n > hostileAllocBound {
				t.Errorf("Parse allocated %d MB, bound %d MB", n>>20, hostileAllocBound>>20)
			}
		})
	}
	// Escaped, the same text is an event: é as \u00e9.
	if e, err := Parse([]byte(`{"v":1,"event":"log","t":1,"msg":"caf\u00e9"}`)); err != nil || e.String("msg") != "café" {
		t.Errorf("escaped é: %+v, %v", e, err)
	}
}
