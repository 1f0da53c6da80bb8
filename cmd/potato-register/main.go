// Command potato-register issues the token of an agent backend and writes
// it to a file of mode 0600 or prints it once; see potato-register(1).
package main

import (
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
)

type command struct {
	Backend   string           `arg:"" help:"The agent backend, a name under model_training.backends."`
	Config    string           `arg:"" help:"The project's config file."`
	Server    string           `placeholder:"URL" help:"The server's URL as the training machine reaches it; left out, the one potato serve listens with here (POTATO_SERVER_LISTEN, POTATO_SERVER_TLS_CERT; http://HOSTNAME:8000 by default)." env:"POTATO_TRAINING_SERVER"`
	TokenFile string           `name:"token-file" placeholder:"PATH" help:"Write the token to PATH, mode 0600, replacing it whole, instead of printing it."`
	Version   kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-register", "Issue an agent backend's token, into a 0600 file (--token-file) or printed once, with the commands to run on the training machine.",
		"potato-register(1)", &command{}, cli.OSEnv()))
}
