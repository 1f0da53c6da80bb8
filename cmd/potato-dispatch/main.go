// Command potato-dispatch takes one training run from start to finish;
// see potato-dispatch(1).
package main

import (
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/curve"
	"potato-training/lib/trainer"
)

type command struct {
	Run       runCmd           `cmd:"" help:"Start a run; print its id at once; wait for its end unless --detach."`
	Curve     curveCmd         `cmd:"" help:"Fit nested shares of the train split in one run and report the learning curve: is more annotation worth it?"`
	Cancel    cancelCmd        `cmd:"" help:"Cancel a run."`
	Status    statusCmd        `cmd:"" help:"Show the runs, or one run."`
	Wait      waitCmd          `cmd:"" help:"Wait for runs to end; exit with the first failed one's status."`
	Latest    latestCmd        `cmd:"" help:"Print the newest successful run's id and model directory (exit 1 when none)."`
	Auto      autoCmd          `cmd:"" help:"Start a run when model_training.auto_retrain calls for one and wait for its end (for cron)."`
	Writeback writebackCmd     `cmd:"" help:"Write a finished run's row and predictions to Potato's store again (after store_failed)."`
	Retract   retractCmd       `cmd:"" help:"Delete a finished run's prelabels from Potato's store; the run stays."`
	Publish   publishCmd       `cmd:"" help:"Publish a successful run's predictions as prelabels by hand, whatever writeback.promote decided."`
	Push      pushCmd          `cmd:"" help:"Send a successful run's model, its tokenizer and a model card to a repo of the Hugging Face Hub (private by default)."`
	Report    reportCmd        `cmd:"" help:"How annotators took the published prelabels: shares accepted per schema, label and annotator, with flags."`
	Explain   explainCmd       `cmd:"" help:"An item's prelabel per schema: its confidence, the run and bundle that made it, the annotators' labels now."`
	Version   kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-dispatch", "Take a training run from start to finish: queue, bundle, backend, limits, write-back.",
		"potato-dispatch(1)", &command{}, cli.OSEnv(),
		// The trainers of --trainer's help come from the registry, as its
		// "unknown trainer" error does.
		kong.Vars{"trainers": trainer.Choices(), "curve_points": curve.DefaultPoints}))
}
