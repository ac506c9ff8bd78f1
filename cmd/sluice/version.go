package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set at build time by `make build` and `make image`:
//
//	-ldflags "-X main.version=V -X main.commit=SHA -X main.date=RFC3339"
//
// date is the commit's time there (SOURCE_DATE_EPOCH), not the time of the
// build, so that the same source and toolchain give the same binary. Empty,
// each falls back on what the go command recorded in the binary (the module
// version of `go install ...@version`, the VCS revision and time of a build
// in a git checkout), else "devel" for the version and "unknown" for the
// others.
var version, commit, date string

// build describes this binary.
type build struct {
	Version  string `json:"version"`
	Module   string `json:"module"`
	Commit   string `json:"commit"`
	Date     string `json:"date"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// buildInfo resolves the build description: ldflags first, then the build
// information the go command embeds.
func buildInfo() build {
	b := build{
		Version: version, Module: "github.com/sluicehq/sluice", Commit: commit, Date: date,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Module = bi.Main.Path
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && commit == "" && b.Commit != "" {
			b.Commit += "-dirty"
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	for _, f := range []*string{&b.Commit, &b.Date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return b
}

// versionFlags defines version's flags on fs and returns the command.
func versionFlags(fs *flag.FlagSet) func(stdout, stderr io.Writer) int {
	asJSON := fs.Bool("json", false, "print one JSON object (version, module, commit, date, go, platform)")
	return func(stdout, _ io.Writer) int {
		b := buildInfo()
		if *asJSON {
			out, _ := json.Marshal(b) // strings only: always marshals
			fmt.Fprintf(stdout, "%s\n", out)
			return exitOK
		}
		fmt.Fprintf(stdout, "sluice %s\nmodule   %s\ncommit   %s\nbuilt    %s\ngo       %s %s\n",
			b.Version, b.Module, b.Commit, b.Date, b.Go, b.Platform)
		return exitOK
	}
}
