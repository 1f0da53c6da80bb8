package ssh

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
		Name:     config.TypeSSH,
		Keys:     config.SSHKeys,
		New:      func(b *config.Backend) backend.Backend { return New(b) },
		Check:    func(ctx context.Context, in check.Input) check.Report { return Check(ctx, in.Backend, in.Judged) },
		Validate: Validate,
		Label:    label,
	})
}

// label is "gpu-server (ssh to gpu.example.org)".
func label(b *config.Backend) string {
	return fmt.Sprintf("%s (ssh to %s)", b.Name, b.Host)
}
