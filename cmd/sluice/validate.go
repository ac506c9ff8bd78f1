package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// validate loads a config and prints every problem, one per line. Exit 1 on
// any error, so it can gate a deploy.
func validate(args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("config", "sluice.yaml", "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*path, proxy.ConfigRules())
	if err != nil {
		printErrors(os.Stderr, err)
		return 1
	}
	for _, w := range warnings(cfg) {
		fmt.Fprintf(os.Stderr, "warning: %s\n", w)
	}
	fmt.Printf("%s: ok (%d providers)\n", *path, len(cfg.Providers))
	return 0
}

// printErrors prints each joined error on its own line.
func printErrors(w *os.File, err error) {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		for _, e := range j.Unwrap() {
			printErrors(w, e)
		}
		return
	}
	fmt.Fprintln(w, err)
}
