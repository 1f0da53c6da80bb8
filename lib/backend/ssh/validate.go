package ssh

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"potato-training/lib/backend"
	"potato-training/lib/config"
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the values of an entry that reaches its host over ssh:
// the connection's keys, the limits, env and packages. The SLURM backend's
// entries start with the same checks.
func Validate(b *config.Backend, p string) []backend.Finding {
	var out []backend.Finding
	errorf := func(k, format string, args ...any) {
		out = append(out, backend.Finding{Key: k, Message: fmt.Sprintf(format, args...)})
	}
	positive := func(k string, v int) {
		if _, set := b.Lines[k]; set && v < 1 {
			errorf(k, "%s.%s is %d: it must be at least 1", p, k, v)
		}
	}
	nonNegative := func(k string, v int) {
		if v < 0 {
			errorf(k, "%s.%s is %d: it cannot be negative", p, k, v)
		}
	}
	if _, set := b.Lines["port"]; set && (b.Port < 1 || b.Port > 65535) {
		errorf("port", "%s.port is %d: a port is between 1 and 65535", p, b.Port)
	}
	if strings.ContainsAny(b.Host, " \t\n") || strings.HasPrefix(b.Host, "-") {
		errorf("host", "%s.host is %q, which is not a host name ssh accepts", p, b.Host)
	}
	if strings.HasPrefix(b.User, "-") {
		errorf("user", "%s.user is %q, which is not a login name", p, b.User)
	}
	if b.Python == "" {
		errorf("python", "%s.python is empty: name an interpreter", p)
	}
	nonNegative("min_free_gpu_mb", b.MinFreeGPUMB)
	nonNegative("num_threads", b.NumThreads)
	positive("max_artifact_mb", b.MaxArtifactMB)
	positive("max_fetch_mb", b.MaxFetchMB)
	for _, k := range slices.Sorted(maps.Keys(b.Env)) {
		if !envNameRE.MatchString(k) {
			errorf("env", "%s.env: %q is not an environment variable name", p, k)
		}
	}
	for _, pkg := range b.Packages {
		if strings.TrimSpace(pkg) == "" || strings.HasPrefix(pkg, "-") {
			errorf("packages", "%s.packages: %q is not a package requirement", p, pkg)
		}
	}
	return out
}
