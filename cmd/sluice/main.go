// Command sluice is an adaptive concurrency-limiting reverse proxy for LLM
// provider APIs.
//
//	sluice serve -config FILE     run the proxy
//	sluice validate -config FILE  check a config, print every error
//	sluice hash-key [-env NAME]   print an API key's SHA-256 (clients:)
//	sluice version                print version, commit, Go version, build date
//	sluice help [COMMAND]         list the commands, or one command's flags
//
// `sluice -config FILE` (flags without a command) is `sluice serve -config
// FILE`, as in earlier releases. The demo (a simulated provider under
// load) is `sluice-bench demo`, or `make demo`: the product binary carries
// none of the benchmark code.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes, the same for every command (listed in the help and in
// docs/operations.md).
const (
	exitOK      = 0 // done; serve: stopped gracefully
	exitFailure = 1 // invalid config, or a failure while starting or running
	exitUsage   = 2 // unknown command, bad flag or argument
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand: what the help says about it and how it runs.
type command struct {
	name    string
	summary string // one line, for the command list
	args    string // after "sluice NAME" in the usage line
	about   string // what it does, for its own help
	example string // one or more example lines
	// secretArgs: what is passed to the command may be a secret (a key
	// pasted by mistake), so a stray argument is not echoed.
	secretArgs bool
	// flags defines the command's flags on fs and returns the function that
	// runs it once they are parsed; nil for a command without flags.
	flags func(fs *flag.FlagSet) func(stdout, stderr io.Writer) int
}

// commands in the order the help lists them.
var commands = []*command{
	{
		name:    "serve",
		summary: "run the proxy",
		args:    "[-config FILE] [-log-level LEVEL]",
		about: `Runs the proxy with the config file. The file is reloaded when it changes
on disk (also through a Kubernetes ConfigMap's symlink swap) and on SIGHUP;
a file with errors is rejected as a whole and the config in force keeps
serving. On SIGTERM or SIGINT Sluice stops accepting, fails /readyz, gives
streams in flight shutdown.grace to finish, cuts the rest and exits 0; a
second signal exits 1 at once. Logs are JSON lines on stderr.`,
		example: `sluice serve -config /etc/sluice/sluice.yaml
OPENAI_API_KEY=sk-... sluice serve -config examples/sluice.yaml -log-level debug`,
		flags: serveFlags,
	},
	{
		name:    "validate",
		summary: "check a config file, print every error with its line",
		args:    "[-config FILE]",
		about: `Loads the config file as serve would, environment variables named by
api_key_env, admin.token_env and cluster.password_env and TLS files
included, without listening or contacting anything. Prints every error,
one per line with file, line and field, and warnings for valid settings
that are probably mistakes. Run it before deploying a config.`,
		example: `sluice validate -config examples/sluice.yaml
OPENAI_API_KEY=x ANTHROPIC_API_KEY=x sluice validate -config /etc/sluice/sluice.yaml && echo ok`,
		flags: validateFlags,
	},
	{
		name:    "hash-key",
		summary: "print the SHA-256 of an API key, for clients: key_sha256",
		args:    "[-env NAME]",
		about: `Reads an API key (the bearer token or x-api-key value a client sends) from
stdin, or from the environment variable named by -env, and prints its hex
SHA-256: the value of a clients: entry's key_sha256. Surrounding spaces and
the trailing newline are not part of the key. The key is never taken from
the command line, where ps and the shell's history would keep it.`,
		example: `sluice hash-key -env TEAM_API_KEY
sluice hash-key < team.key
read -rs KEY && printf '%s' "$KEY" | sluice hash-key`,
		flags:      hashKeyFlags,
		secretArgs: true,
	},
	{
		name:    "version",
		summary: "print version, commit, build date and Go version",
		args:    "[-json]",
		about: `Prints the module version (set at build time, or the version the go command
recorded), the commit, the build date (the commit's time in release
builds, so that the same source gives the same binary), the Go version and
the platform.`,
		example: `sluice version
sluice version -json`,
		flags: versionFlags,
	},
	{
		name:    "help",
		summary: "list the commands, or show one command's flags and example",
		args:    "[COMMAND]",
		about:   `Without a command, lists the commands. With one, shows its flags and an example.`,
		example: `sluice help serve`,
	},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run dispatches args (without the program name) and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// No command: the list, on stderr, and the usage exit code, so that
		// a container started without arguments says what it needs.
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch {
	case name == "help" || name == "-h" || name == "-help" || name == "--help":
		return help(args[1:], stdout, stderr)
	case name == "-version" || name == "--version":
		name, args = "version", args[1:]
	case strings.HasPrefix(name, "-"):
		// Flags without a command: serve, as in earlier releases.
		name = "serve"
	default:
		args = args[1:]
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", name)
		usage(stderr)
		return exitUsage
	}
	return cmd.run(args, stdout, stderr)
}

// run parses the command's flags and runs it: -h prints its help on stdout
// (exit 0); a bad flag or a stray argument prints the error and the help on
// stderr (exit 2).
func (c *command) run(args []string, stdout, stderr io.Writer) int {
	fs := c.flagSet()
	var exec func(stdout, stderr io.Writer) int
	if c.flags != nil {
		exec = c.flags(fs)
	}
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.help(stdout)
			return exitOK
		}
		fmt.Fprintln(stderr)
		c.help(stderr)
		return exitUsage
	}
	if fs.NArg() > 0 && c.secretArgs {
		fmt.Fprintf(stderr, "sluice %s: unexpected argument (not shown: it may be a key)\n\n", c.name)
		c.help(stderr)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice %s: unexpected argument %q\n\n", c.name, fs.Arg(0))
		c.help(stderr)
		return exitUsage
	}
	return exec(stdout, stderr)
}

// flagSet is the command's flag set, its flags not yet defined. Usage is a
// no-op: run prints the help itself, on the stream it belongs to.
func (c *command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+c.name, flag.ContinueOnError)
	fs.Usage = func() {}
	return fs
}

// help writes the command's help: usage, what it does, flags, example,
// exit codes.
func (c *command) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: sluice %s %s\n\n%s\n", c.name, c.args, c.about)
	if c.flags != nil {
		fs := c.flagSet()
		c.flags(fs)
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprint(w, "\nExample:\n")
	for _, line := range strings.Split(c.example, "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
	fmt.Fprint(w, "\n"+exitCodes)
}

const exitCodes = `Exit status:
  0  success (serve: stopped gracefully after SIGTERM or SIGINT)
  1  invalid config, or a failure while starting or running
  2  usage error: unknown command, bad flag or argument
`

// help runs `sluice help [COMMAND]`.
func help(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		usage(stdout)
		return exitOK
	case 1:
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			args[0] = "help"
		}
		if c := lookup(args[0]); c != nil {
			c.help(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "sluice help: unknown command %q\n\n", args[0])
	default:
		fmt.Fprintf(stderr, "sluice help: one command at most, got %q\n\n", args)
	}
	usage(stderr)
	return exitUsage
}

// usage writes the list of commands.
func usage(w io.Writer) {
	fmt.Fprint(w, `Sluice: an adaptive concurrency-limiting reverse proxy for LLM provider APIs.

Usage: sluice COMMAND [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "sluice help COMMAND" or "sluice COMMAND -h" for its flags and an example.
Flags without a command run serve: "sluice -config FILE".

`+exitCodes+`
Every config key: docs/config.md. Running it: docs/operations.md, docs/deploy.md.
`)
}
