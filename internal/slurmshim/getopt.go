package slurmshim

import (
	"fmt"
	"strings"
)

// The imitated commands parse their options as SLURM does, with
// getopt_long: --opt=V, --opt V, -X V, -XV, clustered short flags, and a
// long option abbreviated to any unique prefix.

type optSpec struct {
	long  string
	short byte // 0: none
	arg   bool
}

type opt struct {
	name string // the long name
	val  string
}

// usageError is a getopt complaint; the caller prints it and the
// "Try ... --help" line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// getopt parses args. With permute false (sbatch) parsing stops at the
// first operand, whose followers belong to the script.
func getopt(prog string, specs []optSpec, args []string, permute bool) ([]opt, []string, error) {
	var opts []opt
	var rest []string
	fail := func(format string, a ...any) ([]opt, []string, error) {
		return nil, nil, &usageError{prog + ": " + fmt.Sprintf(format, a...)}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(rest, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			var match *optSpec
			var cands []string
			for k := range specs {
				sp := &specs[k]
				if sp.long == name {
					match, cands = sp, nil
					break
				}
				if strings.HasPrefix(sp.long, name) {
					match = sp
					cands = append(cands, "'--"+sp.long+"'")
				}
			}
			if len(cands) > 1 {
				return fail("option '--%s' is ambiguous; possibilities: %s", name, strings.Join(cands, " "))
			}
			if match == nil {
				return fail("unrecognized option '%s'", a)
			}
			switch {
			case !match.arg && hasVal:
				return fail("option '--%s' doesn't allow an argument", match.long)
			case match.arg && !hasVal:
				if i+1 >= len(args) {
					return fail("option '--%s' requires an argument", match.long)
				}
				i++
				val = args[i]
			}
			opts = append(opts, opt{match.long, val})
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for k := 1; k < len(a); k++ {
				c := a[k]
				var match *optSpec
				for n := range specs {
					if specs[n].short == c {
						match = &specs[n]
						break
					}
				}
				if match == nil {
					return fail("invalid option -- '%c'", c)
				}
				if !match.arg {
					opts = append(opts, opt{match.long, ""})
					continue
				}
				val := a[k+1:]
				if val == "" {
					if i+1 >= len(args) {
						return fail("option requires an argument -- '%c'", c)
					}
					i++
					val = args[i]
				}
				opts = append(opts, opt{match.long, val})
				break
			}
		default:
			if !permute {
				return opts, append(rest, args[i:]...), nil
			}
			rest = append(rest, a)
		}
	}
	return opts, rest, nil
}

// shellWords splits an #SBATCH line as a shell would, for the simple
// quoting such lines use; an unquoted word starting with # ends the line.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
