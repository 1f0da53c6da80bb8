package slurm

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"potato-training/lib/backend"
	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/config"
)

// longTimeWarning is potato-validate's warning of a long time (SPEC V3).
const longTimeWarning = "%s is %s. A job that holds a GPU for more than 6 hours is long on a shared cluster; check its policy"

// maxDuration is the longest time that is not longTimeWarning's.
const maxDuration = 6 * time.Hour

var memRE = regexp.MustCompile(`^[0-9]+[KMGT]?$`)

// Validate checks an entry's values: the ssh backend's checks of the
// connection, then the scheduler's keys and remote_dir, which the compute
// nodes must share.
func Validate(b *config.Backend, p string) []backend.Finding {
	out := sshbackend.Validate(b, p)
	errorf := func(k, format string, args ...any) {
		out = append(out, backend.Finding{Key: k, Message: fmt.Sprintf(format, args...)})
	}
	positive := func(k string, v int) {
		if _, set := b.Lines[k]; set && v < 1 {
			errorf(k, "%s.%s is %d: it must be at least 1", p, k, v)
		}
	}
	if rd := b.RemoteDir; rd != "" && path.IsAbs(rd) {
		clean := path.Clean(rd)
		for _, tmp := range []string{"/tmp", "/var/tmp"} {
			if clean == tmp || strings.HasPrefix(clean, tmp+"/") {
				errorf("remote_dir", "%s.remote_dir is %s, which is under %s: %s is local to each node, and the compute nodes must share remote_dir with the login node", p, rd, tmp, tmp)
			}
		}
	}
	if b.Time != "" {
		d, unlimited, err := config.ParseSLURMTime(b.Time)
		switch {
		case err != nil:
			errorf("time", "%s.time: %v", p, err)
		case unlimited || d > maxDuration:
			out = append(out, backend.Finding{Key: "time", Warning: true, Message: fmt.Sprintf(longTimeWarning, p+".time", b.Time)})
		}
	}
	if b.Mem != "" && !memRE.MatchString(strings.ToUpper(b.Mem)) {
		errorf("mem", "%s.mem is %q: use a size such as 16G or 4000M", p, b.Mem)
	}
	if strings.ContainsAny(b.Gres, " \t\n") {
		errorf("gres", "%s.gres is %q: use the form sbatch accepts, such as gpu:1", p, b.Gres)
	}
	positive("cpus_per_task", b.CPUsPerTask)
	positive("poll_interval_s", b.PollIntervalS)
	for _, k := range []struct{ key, v string }{{"partition", b.Partition}, {"account", b.Account}, {"qos", b.QOS}, {"constraint", b.Constraint}} {
		if strings.ContainsAny(k.v, "\n") || strings.HasPrefix(k.v, "-") {
			errorf(k.key, "%s.%s is %q, which sbatch would not read as a value", p, k.key, k.v)
		}
	}
	for _, line := range b.Prelude {
		if strings.Contains(line, "\n") {
			errorf("prelude", "%s.prelude: give one line per entry", p)
			break
		}
	}
	return out
}
