// Command potato-check tells whether a run of a trainer can start on a
// backend now; see potato-check(1).
package main

import (
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
	"potato-training/lib/trainer"
)

type command struct {
	Backend string           `arg:"" help:"The backend to check: local or a name under model_training.backends."`
	Config  string           `arg:"" help:"The project's config file."`
	Trainer string           `help:"The trainer to judge: ${trainers}; model_training.auto_retrain.trainer, else the first trainer that uses a GPU, when left out." env:"POTATO_TRAINER"`
	Param   []string         `help:"A parameter KEY=VALUE of the run the check is for (hf-llm-classification's quantize); may be repeated. model_training.auto_retrain.params when the trainer is auto_retrain's." placeholder:"KEY=VALUE" sep:"none"`
	JSON    bool             `name:"json" help:"Print the report as JSON."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-check", "Tell whether a run can start on a backend now, and on what device.",
		"potato-check(1)", &command{}, cli.OSEnv(),
		kong.Vars{"trainers": trainer.Choices()}))
}
