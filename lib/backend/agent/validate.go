package agent

import (
	"fmt"

	"potato-training/lib/backend"
	"potato-training/lib/config"
)

// Validate checks an entry's values: queue_timeout_s, when given, is at
// least a second.
func Validate(b *config.Backend, p string) []backend.Finding {
	if _, set := b.Lines["queue_timeout_s"]; set && b.QueueTimeoutS < 1 {
		return []backend.Finding{{Key: "queue_timeout_s", Message: fmt.Sprintf("%s.%s is %d: it must be at least 1", p, "queue_timeout_s", b.QueueTimeoutS)}}
	}
	return nil
}
