// Command potato-server is the thin server of a Potato project's model
// training: the Training page, the HTTP API and the agent routes; see
// potato-server(1).
package main

import (
	"os"

	"github.com/alecthomas/kong"

	"potato-training/internal/cli"
)

type command struct {
	Config  string           `arg:"" help:"The project's config file."`
	Listen  string           `default:"127.0.0.1:8000" help:"Address to listen on, HOST:PORT." env:"POTATO_SERVER_LISTEN"`
	TLSCert string           `name:"tls-cert" help:"PEM file of the TLS certificate chain: serve HTTPS (read again on SIGHUP)." type:"path" env:"POTATO_SERVER_TLS_CERT"`
	TLSKey  string           `name:"tls-key" help:"PEM file of the certificate's private key (with --tls-cert)." type:"path" env:"POTATO_SERVER_TLS_KEY"`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

func main() {
	os.Exit(cli.Main("potato-server", "The thin server of a Potato project's model training: page, HTTP API and agent routes.",
		"potato-server(1)", &command{}, cli.OSEnv()))
}
