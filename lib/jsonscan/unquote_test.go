package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"testing"
)

// checkString compares String with encoding/json on the raw JSON of one
// string.
func checkString(t *testing.T, raw []byte) {
	t.Helper()
	var want string
	if err := json.Unmarshal(raw, &want); err != nil {
		return
	}
	// Only a string Object accepts reaches String.
	vals := make([][]byte, 1)
	if Object(append(append([]byte(`{"k":`), raw...), '}'), []string{"k"}, vals, 10) != nil {
		return
	}
	got, ok := String(vals[0])
	if !ok || got != want {
		t.Errorf("String(%q) = %q, %v; encoding/json: %q", raw, got, ok, want)
	}
}

var stringSeeds = []string{
	`""`, `"plain"`, `"line\nbreak\ttab\r\b\f"`, `"q\"b\\s\/"`, `"\u00e9t\u00E9"`, `"caf\u00e9 ok"`,
	`"\ud83d\ude00"`, `"lone \ud83d high"`, `"lone \ude00 low"`, `"\ud83d\u0041"`, `"\ud83d\\n"`,
	"\"caf\xc3\xa9 ☕\"", "\"bad \xff byte\"", "\"cut \xe2\x82\"", "\"\xed\xa0\x80 surrogate bytes\"",
	`"Subject: Re: x\n\nDate: Wed\n    From: <a@b>"`,
}

func TestStringAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range stringSeeds {
		checkString(t, []byte(s))
	}
}

func TestStringNotAString(t *testing.T) {
	for _, raw := range []string{``, `"`, `null`, `12`, `{"a":1}`, `["x"]`} {
		if s, ok := String([]byte(raw)); ok {
			t.Errorf("String(%q) = %q, true; want false", raw, s)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkString(t, raw) })
}

// plainWord agrees with plainStringByte for every byte at every place of
// a word, among plain bytes and among bytes that are not.
func TestPlainWord(t *testing.T) {
	for _, fill := range []byte{'a', 0x20, 0xff, 0x80, 0x21, 0x5d, 0x1f} {
		for v := range 256 {
			for p := range 8 {
				w := [8]byte{fill, fill, fill, fill, fill, fill, fill, fill}
				w[p] = byte(v)
				want := plainStringByte[v] && plainStringByte[fill]
				if got := plainWord(binary.LittleEndian.Uint64(w[:])); got != want {
					t.Fatalf("plainWord(%q) = %v, want %v", w, got, want)
				}
			}
		}
	}
}
