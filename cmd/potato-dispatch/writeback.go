package main

import (
	"encoding/json"
	"fmt"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
)

type writebackCmd struct {
	Config string `arg:"" help:"The project's config file."`
	RunID  string `arg:"" name:"run-id" help:"The finished run to write to Potato's store."`
	DryRun bool   `name:"dry-run" help:"Write nothing; print per schema the prelabels it would add, change, remove and keep."`
	JSON   bool   `name:"json" help:"With --dry-run, print the preview as JSON."`
}

// Run writes a finished run's row, items and predictions to Potato's
// store again, such as a run that ended with store_failed; it is
// idempotent. With --dry-run it writes nothing and prints what it would
// do to each schema's prelabels.
func (c *writebackCmd) Run(ctx *cli.Context) error {
	if c.DryRun {
		p, err := dispatch.PreviewWriteback(c.Config, c.RunID)
		if err != nil {
			return exitError(err)
		}
		if c.JSON {
			b, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(ctx.Stdout, "%s\n", b)
			return err
		}
		fmt.Fprintf(ctx.Stdout, "run %s would write %d of %d predictions (%d in the train split, %d below min_confidence, %d of schemas not in writeback.schemas, %d held by a newer run, %d refused)\n",
			p.RunID, p.Report.NWritten, p.Report.NRead, p.Report.NSkippedTrainSplit, p.Report.NSkippedLowConfidence,
			p.Report.NSkippedSchemaNotEnabled, p.Report.NSkippedNewerRun, p.Report.NRefused)
		if p.Report.FirstRefused != "" {
			fmt.Fprintf(ctx.Stdout, "refused, the first: %s\n", p.Report.FirstRefused)
		}
		for _, sp := range p.Schemas {
			fmt.Fprintln(ctx.Stdout, sp)
		}
		return nil
	}
	if c.JSON {
		return exitError(&dispatch.UsageError{Err: fmt.Errorf("--json goes with --dry-run")})
	}
	s, err := dispatch.Writeback(c.Config, c.RunID)
	if err != nil {
		return exitError(err)
	}
	fmt.Fprintln(ctx.Stdout, s)
	return nil
}
