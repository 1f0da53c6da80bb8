package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseSLURMTime reads a time limit in any form sbatch --time accepts:
// M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and INFINITE or UNLIMITED. unlimited
// is true for those words and for 0, which sbatch reads as no limit.
func ParseSLURMTime(s string) (d time.Duration, unlimited bool, err error) {
	s = strings.TrimSpace(s)
	switch strings.ToUpper(s) {
	case "INFINITE", "UNLIMITED", "-1":
		return 0, true, nil
	}
	bad := fmt.Errorf("%q is not a SLURM time: use M, M:S, H:M:S, D-H, D-H:M or D-H:M:S", s)
	num := func(p string) (int64, bool) {
		if p == "" || len(p) > 9 {
			return 0, false
		}
		for _, r := range p {
			if r < '0' || r > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseInt(p, 10, 64)
		return n, err == nil
	}
	var days, h, m, sec int64
	rest := s
	if i := strings.IndexByte(s, '-'); i >= 0 {
		var ok bool
		if days, ok = num(s[:i]); !ok {
			return 0, false, bad
		}
		parts := strings.Split(s[i+1:], ":")
		if len(parts) > 3 {
			return 0, false, bad
		}
		vals := make([]int64, 3)
		for j, p := range parts {
			if vals[j], ok = num(p); !ok {
				return 0, false, bad
			}
		}
		h, m, sec = vals[0], vals[1], vals[2]
	} else {
		parts := strings.Split(rest, ":")
		vals := make([]int64, len(parts))
		for j, p := range parts {
			var ok bool
			if vals[j], ok = num(p); !ok {
				return 0, false, bad
			}
		}
		switch len(vals) {
		case 1:
			m = vals[0]
		case 2:
			m, sec = vals[0], vals[1]
		case 3:
			h, m, sec = vals[0], vals[1], vals[2]
		default:
			return 0, false, bad
		}
	}
	total := ((days*24+h)*60+m)*60 + sec
	if total == 0 {
		return 0, true, nil
	}
	return time.Duration(total) * time.Second, false, nil
}
