package main

import (
	"errors"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

// exitError maps lib/dispatch's errors to exit statuses: 2 for a usage
// error, 1 for anything else.
func exitError(err error) error {
	var ue *dispatch.UsageError
	switch {
	case errors.As(err, &ue):
		return cli.Failf(cli.ExitUsage, "%v", err)
	case err != nil:
		return cli.Failf(cli.ExitNo, "%v", err)
	}
	return nil
}
