package agent

import (
	"context"
	"fmt"

	"potato-training/lib/backend"
	"potato-training/lib/check"
	"potato-training/lib/config"
)

var _ backend.Backend = (*Backend)(nil)

func init() {
	backend.Register(backend.Descriptor{
		Name: config.TypeAgent,
		Keys: config.AgentKeys,
		New:  func(b *config.Backend) backend.Backend { return New(b) },
		Check: func(_ context.Context, in check.Input) check.Report {
			return Check(in.Config, in.Backend, in.Now, in.Judged)
		},
		Validate:   Validate,
		Label:      label,
		Tokens:     true,
		ModelStays: "an agent backend keeps its model on the agent's machine",
	})
}

// label is "lab (agent)".
func label(b *config.Backend) string {
	return fmt.Sprintf("%s (agent)", b.Name)
}
