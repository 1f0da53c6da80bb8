package local

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
		Name: config.TypeLocal,
		New:  func(*config.Backend) backend.Backend { return New() },
		Check: func(ctx context.Context, in check.Input) check.Report {
			return Check(ctx, in.Config, in.GPU, in.Judged)
		},
		Label:    label,
		OnServer: true,
	})
}

// label is "local (this machine)".
func label(b *config.Backend) string {
	return fmt.Sprintf("%s (this machine)", b.Name)
}
