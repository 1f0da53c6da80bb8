package main

import (
	"os"

	"potato-training/internal/cli"
	"potato-training/lib/bundle"
	"potato-training/lib/shell"
)

// sendCmd is the host's half of the ssh backend's copy of the model back
// (sshx.Conn.Fetch), run through the run's ssh connection: the directory's
// regular files as a tree stream on standard output, or with --file the
// content of one file that the stream announced to be sent apart.
type sendCmd struct {
	MaxBytes  int64  `name:"max-bytes" help:"Leave out files over this many bytes (0: none)."`
	DirectMin int64  `name:"direct-min" help:"Announce files over this many bytes, to be sent apart with --file (0: none)."`
	File      string `help:"Send only this file's content, a file of --size bytes under DIR."`
	Size      int64  `help:"The size --file must have."`
	Dir       string `arg:"" help:"The directory to send."`
}

func (c *sendCmd) Run(ctx *cli.Context) error {
	if f, ok := ctx.Stdout.(*os.File); ok {
		growPipe(f)
	}
	var err error
	if c.File != "" {
		err = bundle.SendFile(ctx.Stdout, shell.ExpandHome(c.Dir), c.File, c.Size)
	} else {
		err = bundle.WriteTree(ctx.Stdout, shell.ExpandHome(c.Dir), c.MaxBytes, c.DirectMin)
	}
	return exitError(err)
}
