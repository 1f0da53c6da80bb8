package slurm

import (
	"context"
	"fmt"

	"potato-training/lib/backend"
	sshbackend "potato-training/lib/backend/ssh"
	"potato-training/lib/check"
	"potato-training/lib/config"
)

// New returns the ssh backend, adapted to a login node.
var _ backend.Backend = (*sshbackend.Backend)(nil)

func init() {
	backend.Register(backend.Descriptor{
		Name:     config.TypeSLURM,
		Keys:     config.SLURMKeys,
		New:      func(b *config.Backend) backend.Backend { return New(b) },
		Check:    func(ctx context.Context, in check.Input) check.Report { return Check(ctx, in.Backend, in.Judged) },
		Validate: Validate,
		Label:    label,
	})
}

// label is "cluster (slurm via login.cluster.example.org)".
func label(b *config.Backend) string {
	return fmt.Sprintf("%s (slurm via %s)", b.Name, b.Host)
}
