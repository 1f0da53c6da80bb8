package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"potato-training/internal/cli"
	"potato-training/lib/dispatch"
	"potato-training/lib/hub"
	"potato-training/lib/trainer"
)

type pushCmd struct {
	Config    string `arg:"" help:"The project's config file."`
	RunID     string `arg:"" name:"run-id" help:"The successful run whose model to push."`
	Repo      string `required:"" placeholder:"OWNER/NAME" help:"The model repo on the Hub; made when missing." env:"POTATO_HUB_REPO"`
	Schema    string `help:"The schema whose model to push, when the run trained several."`
	Private   bool   `xor:"visibility" help:"Make a new repo private, and refuse to push to an existing public one (the default)."`
	Public    bool   `xor:"visibility" help:"Make a new repo public, and push to an existing public one."`
	Revision  string `help:"The branch to commit to, made from main when missing (default main)."`
	BaseModel string `name:"base-model" placeholder:"ID" help:"The base model's id on the Hub, for the model card, when the run named a directory."`
	TokenFile string `name:"token-file" type:"path" help:"File holding the Hub token, mode 0600 or stricter (else $HF_TOKEN, else the Hub's own token file)." env:"POTATO_HF_TOKEN_FILE"`
	DryRun    bool   `name:"dry-run" help:"Print the files and the model card that would be sent; send nothing."`
	JSON      bool   `name:"json" help:"Print the push as JSON."`
}

// Run sends a successful hf-text-classification run's model, its
// tokenizer and a model card to a repo of the Hugging Face Hub, with
// huggingface_hub run by the interpreter of local runs.
func (c *pushCmd) Run(ctx *cli.Context) error {
	for _, err := range []error{hub.CheckRepo(c.Repo), hub.CheckRevision(c.Revision), hub.CheckBaseModel(c.BaseModel)} {
		if err != nil {
			return pushError(err)
		}
	}
	cfg, err := dispatch.LoadConfig(c.Config)
	if err != nil {
		return exitError(err)
	}
	root, err := dispatch.Root(cfg)
	if err != nil {
		return exitError(err)
	}
	m, err := hub.Find(root, c.RunID, c.Schema)
	if err != nil {
		return pushError(err)
	}
	opt := hub.CardOptions{Repo: c.Repo, BaseModel: c.BaseModel}
	opt.Base = hub.ReadBaseCard(m.Card.BaseModel, os.Getenv)
	if opt.Base.From == "" {
		opt.Base = hub.ReadBaseCard(m.BaseID(opt), os.Getenv)
	}
	card := m.README(opt)
	if c.DryRun {
		return c.printPlan(ctx, m, card)
	}
	token, err := hub.FindToken(c.TokenFile, os.Getenv)
	if err != nil {
		return pushError(err)
	}
	lp := trainer.LocalPythonOf(cfg)
	python, err := lp.Find()
	if err != nil {
		return cli.Failf(cli.ExitNo, "%v", err).WithHint("the push runs huggingface_hub with the interpreter of local runs: %s", lp.Describe())
	}
	sctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	res, err := hub.Push(sctx, root, m, card, hub.Request{Repo: c.Repo, Private: !c.Public, Revision: c.Revision, Python: python, Token: token})
	if err != nil {
		return pushError(err)
	}
	if c.JSON {
		return printJSON(ctx, res)
	}
	vis, made := "public", ""
	if res.Private {
		vis = "private"
	}
	if res.Created {
		made = ", new"
	}
	_, err = fmt.Fprintf(ctx.Stdout, "run %s: %s pushed to %s (%s%s), revision %s, commit %s: %d files, %.1f MB\n",
		res.RunID, hub.ModelDirName(res.Schema), res.RepoURL, vis, made, res.Revision, res.CommitOID, res.Files, float64(res.Bytes)/(1<<20))
	return err
}

// printPlan prints what a push would send: the files, then the model
// card.
func (c *pushCmd) printPlan(ctx *cli.Context, m *hub.Model, card string) error {
	if c.JSON {
		return printJSON(ctx, map[string]any{"run_id": m.Record.RunID, "schema": m.Schema, "repo": c.Repo,
			"private": !c.Public, "kind": m.Kind, "files": m.Files, "readme": card})
	}
	vis := "private"
	if c.Public {
		vis = "public"
	}
	fmt.Fprintf(ctx.Stdout, "run %s: %s (%s) would go to %s (%s): %d files and README.md, %.1f MB\n",
		m.Record.RunID, hub.ModelDirName(m.Schema), m.Kind, c.Repo, vis, len(m.Files), float64(m.Bytes())/(1<<20))
	for _, f := range m.Files {
		fmt.Fprintf(ctx.Stdout, "  %-40s %12d\n", f.InRepo, f.Bytes)
	}
	_, err := fmt.Fprintf(ctx.Stdout, "\nREADME.md:\n%s", card)
	return err
}

// pushError maps lib/hub's errors to exit statuses: 2 for a usage error
// (a bad repo name, a schema the run did not train, no token), 1 for a
// run that cannot be pushed and for a push that failed.
func pushError(err error) error {
	var ue *hub.UsageError
	var md *hub.MissingDependency
	switch {
	case errors.As(err, &ue):
		return cli.Failf(cli.ExitUsage, "%v", err)
	case errors.As(err, &md):
		return cli.Failf(cli.ExitNo, "%v", err).WithHint("install huggingface_hub there, or set model_training.python or POTATO_TRAINING_PYTHON to an interpreter that has it")
	}
	return cli.Failf(cli.ExitNo, "%v", err)
}
