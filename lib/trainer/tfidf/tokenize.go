package tfidf

import (
	"unicode"
	"unicode/utf8"
)

// Tokenize returns the words of text as the model sees them. A word is a
// maximal run of Unicode letters, digits and combining marks, lowercased;
// everything else separates words. An apostrophe (' or ’) between two word
// characters stays inside the word as ', so "Don't" is the one word "don't".
func Tokenize(text string) []string {
	buf, ends := appendTokens(text, nil, nil)
	out := make([]string, len(ends))
	start := 0
	for i, end := range ends {
		out[i] = string(buf[start:end])
		start = end
	}
	return out
}

// Terms returns the candidate features of text: its words in order,
// followed by each pair of adjacent words joined by one space.
func Terms(text string) []string {
	words := Tokenize(text)
	out := words
	for i := 1; i < len(words); i++ {
		out = append(out, words[i-1]+" "+words[i])
	}
	return out
}

// appendTokens appends the lowercased words of text to buf, one after
// another with no separator, and the end offset in buf of each word to
// ends. Returning offsets into one buffer lets callers look words up in a
// map without allocating a string per word.
func appendTokens(text string, buf []byte, ends []int) ([]byte, []int) {
	in := false
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			switch {
			case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
				buf = append(buf, c)
				in = true
				i++
				continue
			case 'A' <= c && c <= 'Z':
				buf = append(buf, c+('a'-'A'))
				in = true
				i++
				continue
			case c == '\'' && in && wordRuneAt(text, i+1):
				buf = append(buf, '\'')
				i++
				continue
			}
			if in {
				ends = append(ends, len(buf))
				in = false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		switch {
		case isWordRune(r):
			buf = utf8.AppendRune(buf, unicode.ToLower(r))
			in = true
		case r == '’' && in && wordRuneAt(text, i+size):
			buf = append(buf, '\'')
		case in:
			ends = append(ends, len(buf))
			in = false
		}
		i += size
	}
	if in {
		ends = append(ends, len(buf))
	}
	return buf, ends
}

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func wordRuneAt(text string, i int) bool {
	if i >= len(text) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(text[i:])
	return isWordRune(r)
}
