// Command sluice is an adaptive concurrency-limiting reverse proxy for LLM
// provider APIs.
//
//	sluice serve -config FILE     run the proxy (the default command)
//	sluice validate -config FILE  check a config, print every error
//	sluice version                print the version
//
// The demo (a simulated provider under load) is `sluice-bench demo`, or
// `make demo`: the product binary carries none of the benchmark code.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "validate":
		return validate(args)
	case "version":
		fmt.Println("sluice", version)
		return 0
	case "help", "-h", "--help":
		usage()
		return 0
	}
	fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", cmd)
	usage()
	return 2
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  sluice serve -config FILE     run the proxy (default command)
  sluice validate -config FILE  check a config file and print every error
  sluice version                print the version
`)
}
