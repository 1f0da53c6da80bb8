package project

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"potato-training/internal/memtest"
)

// hostileAllocBound is the most a hostile user_state.json may make the
// reader allocate (docs/reliability.md).
const hostileAllocBound = 64 << 20

// TestUserStateHostile checks that a user_state.json that is not UTF-8,
// nests too deeply (in a key that is skipped, or in an item's labels) or
// has data after its object is refused with an error that names the file,
// within hostileAllocBound. The 10,000,000-deep skipped key, 20 MB,
// made skipValue allocate 469 MB before it had a bound on depth.
func TestUserStateHostile(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, text, want string
	}{
		{"invalid UTF-8 in a label", "{\"instance_id_to_label_to_value\": {\"i1\": {\"sentiment\": {\"caf\xe9\": true}}}}", "not valid UTF-8 at byte 60"},
		{"invalid UTF-8 in a skipped key", "{\"notes\": \"\xff\xfe\", \"user_id\": \"u\"}", "not valid UTF-8 at byte 11"},
		{"cut rune at the end", "{\"user_id\": \"u\xe2\x82", "not valid UTF-8 at byte 14"},
		{"lone continuation byte", "{\"user_id\": \"\x80\"}", "not valid UTF-8 at byte 13"},
		{"surrogate encoded", "{\"user_id\": \"\xed\xa0\x80\"}", "not valid UTF-8 at byte 13"},
		{"nested 10,000,000 deep in a skipped key", `{"notes": ` + deep(10_000_000) + `}`, "nested too deeply"},
		{"nested 100,000 deep in labels", `{"instance_id_to_label_to_value": {"i1": ` + deep(100_000) + `}}`, "exceeded max depth"},
		{"data after the object", `{"user_id": "u"} {"user_id": "v"}`, "data after the end of the JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "user_state.json")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			var err error
			n := memtest.Allocated(func() { _, err = readUserState(path, nil) })
			if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %s: ...%s", err, path, tc.want)
			}
			if n > hostileAllocBound {
				t.Errorf("reading allocated %d MB, bound %d MB", n>>20, hostileAllocBound>>20)
			}
		})
	}
}

// TestUTF8Reader reads UTF-8 with runes cut at every read boundary, and
// finds the first invalid byte at its offset however the reads fall.
func TestUTF8Reader(t *testing.T) {
	good := "a\u00e9\u20ac\U0001F600z\U0001F600\u00e9"
	readers := map[string]func(io.Reader) io.Reader{
		"whole": func(r io.Reader) io.Reader { return r }, "one byte": iotest.OneByteReader,
		"half": iotest.HalfReader, "data err": iotest.DataErrReader,
	}
	for name, wrap := range readers {
		b, err := io.ReadAll(newUTF8Reader(wrap(strings.NewReader(good))))
		if err != nil || string(b) != good {
			t.Errorf("%s: %q, %v", name, b, err)
		}
		for _, tc := range []struct {
			in   string
			want string
		}{
			{good + "\xff", "byte 17"}, {good[:3] + "\xff" + good[3:], "byte 3"},
			{good + "\xf0\x9f\x98", "byte 17"}, {"\xc3(", "byte 0"}, {"ab\xe2\x82(", "byte 2"},
		} {
			_, err := io.ReadAll(newUTF8Reader(wrap(strings.NewReader(tc.in))))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %q: err %v, want %s", name, tc.in, err, tc.want)
			}
		}
	}
	// Everything before the bad byte is passed on, and nothing after.
	var out bytes.Buffer
	_, err := io.Copy(&out, newUTF8Reader(iotest.OneByteReader(strings.NewReader("ok\xffno"))))
	if err == nil || out.String() != "ok" {
		t.Errorf("passed on %q, err %v", out.String(), err)
	}
}
