// Package cli holds the command-line conventions every binary shares:
// kong parsing with exit status 2 for usage errors, help that ends with
// the man page's name, and "name: error:" / "name: hint:" lines.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"
)

// Version is the toolkit's version, the one source of it: --version
// prints it, and the Makefile reads it from this line for the names of the
// tarballs and the version of the wheels (make dist), so it stays a
// string literal here.
const Version = "0.1.0"

// Exit statuses shared by every binary (see the EXIT STATUS section of
// each man page).
const (
	ExitOK    = 0
	ExitNo    = 1 // failed, invalid, or "no"
	ExitUsage = 2 // usage error or unreadable input
	// ExitClosedPipe is the status of a program that wrote to a pipe whose
	// reader is gone ("potato-agent --help | head"): what a shell reports
	// for one that died of SIGPIPE, 128 + 13.
	ExitClosedPipe = 141
)

// Env is what a command sees of the world: injected so tests can run a
// command in-process.
type Env struct {
	Args   []string // without the program name
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// InvokedAs is the name the help and the usage show in place of the
	// binary's: "potato training" when the front command ran
	// "potato-dispatch run ..." for "potato training run ...". Empty means
	// the binary's own name.
	InvokedAs string
}

// InvokedAsVar is the environment variable through which the front
// command passes Env.InvokedAs to the binary it runs.
const InvokedAsVar = "POTATO_INVOKED_AS"

// OSEnv is the process's own environment. It takes InvokedAsVar out of
// the environment, so that the programs this one starts do not inherit it.
func OSEnv() Env {
	invoked := os.Getenv(InvokedAsVar)
	os.Unsetenv(InvokedAsVar)
	return Env{Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, InvokedAs: invoked}
}

// ExitError carries an exit status and a message for a command's Run.
// Hints are printed after the message, one "name: hint:" line each.
type ExitError struct {
	Code  int
	Err   error
	Hints []string
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns an error that makes Main exit with code and print nothing.
func Exit(code int) error { return &ExitError{Code: code} }

// Failf returns an error that exits with code and prints the message.
func Failf(code int, format string, args ...any) *ExitError {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// WithHint adds a hint line to an ExitError.
func (e *ExitError) WithHint(format string, args ...any) *ExitError {
	e.Hints = append(e.Hints, fmt.Sprintf(format, args...))
	return e
}

type exitPanic int

// Main parses env.Args into grammar (a pointer to a kong command struct
// whose Run methods take *Context), runs the selected command and returns
// the exit status. manPage is e.g. "potato-validate(1)". opts are further
// kong options, such as kong.Vars for help texts made at run time.
//
// The help, the usage and the "see ... --help" hint name the command as
// env.InvokedAs when it is set; the error lines always name the binary,
// the program that speaks.
func Main(name, description, manPage string, grammar any, env Env, opts ...kong.Option) (code int) {
	defer func() {
		if r := recover(); r != nil {
			if c, ok := r.(exitPanic); ok {
				code = int(c)
				return
			}
			panic(r)
		}
	}()
	usageName := name
	if env.InvokedAs != "" {
		usageName = env.InvokedAs
	}
	options := []kong.Option{
		kong.Name(usageName),
		kong.Description(description),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(c int) { panic(exitPanic(c)) }),
		kong.Vars{"version": VersionText()},
		kong.Help(func(options kong.HelpOptions, ctx *kong.Context) error {
			if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
				return err
			}
			_, err := fmt.Fprintf(ctx.Stdout, "\nSee %s.\n", manPage)
			return err
		}),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	}
	parser, err := kong.New(grammar, append(options, opts...)...)
	if err != nil {
		panic(err)
	}
	kctx, err := parser.Parse(env.Args)
	if errors.Is(err, syscall.EPIPE) {
		// --help or --version into a pipe that was closed early: what a
		// program killed by the SIGPIPE would do, quietly (potato-agent
		// catches the signal, so it sees the error instead).
		return ExitClosedPipe
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: error: %v\n", name, err)
		fmt.Fprintf(env.Stderr, "%s: hint: see %s --help\n", name, helpCommand(usageName, err))
		return ExitUsage
	}
	err = kctx.Run(&Context{Env: env, Name: name})
	return report(name, env.Stderr, err)
}

// helpCommand is the command whose --help answers a parse error: the
// subcommand that was being parsed, when there is one ("potato-dispatch
// run").
func helpCommand(usageName string, err error) string {
	var pe *kong.ParseError
	if !errors.As(err, &pe) || pe.Context == nil {
		return usageName
	}
	var words []string
	for n := pe.Context.Selected(); n != nil && n.Type == kong.CommandNode; n = n.Parent {
		words = append([]string{n.Name}, words...)
	}
	return strings.Join(append([]string{usageName}, words...), " ")
}

// Context is handed to every Run method.
type Context struct {
	Env
	Name string
}

func report(name string, stderr io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(stderr, "%s: error: %v\n", name, ee.Err)
		}
		for _, h := range ee.Hints {
			fmt.Fprintf(stderr, "%s: hint: %s\n", name, h)
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "%s: error: %v\n", name, err)
	return ExitNo
}
