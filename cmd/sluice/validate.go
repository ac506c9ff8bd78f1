package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/config"
)

// validateFlags defines validate's flags on fs and returns the command: it
// loads a config and prints every problem, one per line. Exit 1 on any
// error, so it can gate a deploy.
func validateFlags(fs *flag.FlagSet) func(stdout, stderr io.Writer) int {
	path := fs.String("config", "sluice.yaml", "the config `FILE` to check")
	return func(stdout, stderr io.Writer) int {
		cfg, err := config.Load(*path)
		if err != nil {
			printErrors(stderr, err)
			return exitFailure
		}
		for _, w := range warnings(cfg) {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "%s: ok (%d providers)\n", *path, len(cfg.Providers))
		return exitOK
	}
}

// printErrors prints each joined error on its own line.
func printErrors(w io.Writer, err error) {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		for _, e := range j.Unwrap() {
			printErrors(w, e)
		}
		return
	}
	fmt.Fprintln(w, err)
}
