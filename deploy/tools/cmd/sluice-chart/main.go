// Command sluice-chart lints and renders deploy/helm/sluice with Helm's Go
// packages (the version deploy/tools/go.mod pins), for machines without a
// helm binary: `make chart-template` runs it.
//
//	sluice-chart lint [-f values.yaml]... [--set key=value]...
//	sluice-chart template [-f values.yaml]... [--set key=value]... [-summary]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicehq/sluice/deploy/tools/chart"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "lint" && args[0] != "template") {
		fmt.Fprintln(stderr, "usage: sluice-chart lint|template [-chart DIR] [-f values.yaml]... [--set key=value]... [-summary]")
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("sluice-chart "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("chart", "deploy/helm/sluice", "the chart `DIR`")
	var files, sets list
	fs.Var(&files, "f", "a values `FILE` (repeatable)")
	fs.Var(&sets, "set", "a value, `key=value` in Helm's syntax (repeatable)")
	release := fs.String("release", chart.DefaultRelease.Name, "release name")
	namespace := fs.String("namespace", chart.DefaultRelease.Namespace, "namespace")
	kube := fs.String("kube-version", chart.DefaultKubeVersion, "Kubernetes `VERSION` to render for")
	summary := fs.Bool("summary", false, "template: one line per object instead of the manifests")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	vals, err := chart.Values(files, sets)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-chart: %v\n", err)
		return 1
	}
	if cmd == "lint" {
		problems, info := chart.Lint(*dir, vals)
		for _, m := range append(info, problems...) {
			fmt.Fprintln(stdout, m)
		}
		if len(problems) > 0 {
			fmt.Fprintf(stderr, "sluice-chart lint: %d problems\n", len(problems))
			return 1
		}
		fmt.Fprintf(stdout, "%s: linted, no warnings or errors\n", *dir)
		return 0
	}
	ms, _, err := chart.Render(*dir, vals, chart.Release{Name: *release, Namespace: *namespace, KubeVersion: *kube})
	if err != nil {
		fmt.Fprintf(stderr, "sluice-chart: %v\n", err)
		return 1
	}
	if *summary {
		fmt.Fprint(stdout, chart.Summary(ms))
		return 0
	}
	fmt.Fprint(stdout, chart.Print(ms))
	return 0
}
