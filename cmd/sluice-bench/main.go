// Command sluice-bench runs Sluice's benchmark tools. Each tool is a
// subcommand registered by its own file:
//
//	sluice-bench sim [flags]   run a simulated LLM provider (bench/sim)
//	sluice-bench demo [flags]  the demo of `make demo` (bench/demo)
//
// Run "sluice-bench help" for the list and "sluice-bench CMD -h" for a
// command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// command is one subcommand. run gets the arguments after the command name
// and a context cancelled on SIGINT or SIGTERM; it returns the exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands is filled by register calls in each subcommand's file.
var commands = map[string]command{}

// register adds a subcommand; call it from an init function.
func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	if _, dup := commands[name]; dup {
		panic("sluice-bench: duplicate command " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// dispatch runs the subcommand named by args[0].
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "sluice-bench: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice-bench COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// parseFlags parses a command's arguments into fs (named after the
// command). ok is false when the command must stop, with its exit code: 0
// after -h, 2 for a bad flag or arguments that are not flags.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return 2, false
	}
	return 0, true
}
