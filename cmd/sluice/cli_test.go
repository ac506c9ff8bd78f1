package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runCLI runs the command line in process and returns its exit code and
// what it wrote.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The command list: every command, one line each, with the exit codes; on
// stdout when asked for (help, -h, --help), on stderr with exit 2 when no
// command was given or the command is unknown.
func TestCommandList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		code     int
		onStdout bool
		prefix   string // on stderr before the list
	}{
		{nil, exitUsage, false, ""},
		{[]string{"help"}, exitOK, true, ""},
		{[]string{"-h"}, exitOK, true, ""},
		{[]string{"-help"}, exitOK, true, ""},
		{[]string{"--help"}, exitOK, true, ""},
		{[]string{"bogus"}, exitUsage, false, `sluice: unknown command "bogus"`},
		{[]string{"help", "bogus"}, exitUsage, false, `sluice help: unknown command "bogus"`},
		{[]string{"help", "serve", "validate"}, exitUsage, false, "sluice help: one command at most"},
	} {
		code, stdout, stderr := runCLI(tc.args...)
		list := stderr
		if tc.onStdout {
			list = stdout
			if stderr != "" {
				t.Errorf("%q wrote to stderr: %s", tc.args, stderr)
			}
		} else if stdout != "" {
			t.Errorf("%q wrote to stdout: %s", tc.args, stdout)
		}
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d", tc.args, code, tc.code)
		}
		if !strings.HasPrefix(list, tc.prefix) {
			t.Errorf("%q: output starts %q, want %q", tc.args, first(list), tc.prefix)
		}
		for _, c := range commands {
			line := regexp.MustCompile(`(?m)^  ` + c.name + ` +` + regexp.QuoteMeta(c.summary) + `$`)
			if !line.MatchString(list) {
				t.Errorf("%q: no line for %s in\n%s", tc.args, c.name, list)
			}
		}
		for _, want := range []string{"Exit status:", "  0  ", "  1  ", "  2  "} {
			if !strings.Contains(list, want) {
				t.Errorf("%q: list without %q", tc.args, want)
			}
		}
	}
}

// Every command's help (sluice help CMD, sluice CMD -h) shows its usage,
// its flags, an example and the exit codes, on stdout, exit 0.
func TestCommandHelp(t *testing.T) {
	t.Parallel()
	flags := map[string][]string{
		"serve":    {"-config FILE", "-log-level LEVEL"},
		"validate": {"-config FILE"},
		"version":  {"-json"},
	}
	for _, c := range commands {
		ways := [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}}
		if c.name == "help" {
			ways = [][]string{{"help", "help"}, {"help", "-h"}}
		}
		for _, args := range ways {
			code, stdout, stderr := runCLI(args...)
			if code != exitOK || stderr != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
			}
			for _, want := range append([]string{"Usage: sluice " + c.name, "Example:\n  sluice " + c.name, "Exit status:"}, flags[c.name]...) {
				if !strings.Contains(stdout, want) {
					t.Errorf("%q: help without %q:\n%s", args, want, stdout)
				}
			}
		}
	}
}

// A bad flag or a stray argument is a usage error: the message and the
// command's help on stderr, exit 2.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"validate", "-config"}, "flag needs an argument: -config"},
		{[]string{"validate", "-config", "x.yaml", "extra"}, `sluice validate: unexpected argument "extra"`},
		{[]string{"serve", "-log-level", "loud"}, "sluice serve: -log-level"},
		{[]string{"version", "now"}, `sluice version: unexpected argument "now"`},
		{[]string{"-nope"}, "flag provided but not defined: -nope"}, // flags alone: serve's
	} {
		code, stdout, stderr := runCLI(tc.args...)
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr starts %q; want 2 and %q", tc.args, code, stdout, first(stderr), tc.want)
		}
	}
}

// validate: exit 0 and "ok" for the example config, exit 1 with every
// error (file and line) for a bad one.
func TestValidateExitCodes(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-test")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test")
	code, stdout, stderr := runCLI("validate", "-config", "../../examples/sluice.yaml")
	if code != exitOK || !strings.Contains(stdout, "examples/sluice.yaml: ok (3 providers)") {
		t.Errorf("example config: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: 127.0.0.1:8080\nproviders:\n  - name: x\n    upstream: ftp://x\n    limit: { ceilling: 3 }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI("validate", "-config", bad)
	if code != exitFailure || stdout != "" {
		t.Errorf("bad config: exit %d, stdout %q", code, stdout)
	}
	for _, want := range []string{"bad.yaml:4: providers[0].upstream", "bad.yaml:5: providers[0].limit.ceilling: unknown key"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("bad config: stderr without %q:\n%s", want, stderr)
		}
	}
	if code, _, stderr := runCLI("validate", "-config", filepath.Join(t.TempDir(), "missing.yaml")); code != exitFailure || stderr == "" {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
}

// version prints the version, module, commit, build date, Go version and
// platform, as text or JSON; -version is the same.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runCLI(args...)
		if code != exitOK || stderr != "" {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr)
		}
		for _, re := range []string{`^sluice \S+\n`, `(?m)^module   github.com/sluicehq/sluice$`, `(?m)^commit   \S+$`, `(?m)^built    \S+$`, `(?m)^go       go1\.\S+ \w+/\w+$`} {
			if !regexp.MustCompile(re).MatchString(stdout) {
				t.Errorf("%q: output does not match %s:\n%s", args, re, stdout)
			}
		}
	}
	code, stdout, _ := runCLI("version", "-json")
	var b build
	if err := json.Unmarshal([]byte(stdout), &b); err != nil || code != exitOK {
		t.Fatalf("version -json: exit %d, %v: %s", code, err, stdout)
	}
	if b.Module != "github.com/sluicehq/sluice" || b.Version == "" || b.Commit == "" || b.Date == "" || !strings.HasPrefix(b.Go, "go1.") || b.Platform == "" {
		t.Errorf("version -json: %+v", b)
	}
}

// Values set with -ldflags -X win over the build information.
func TestVersionFromLdflags(t *testing.T) {
	old := [3]string{version, commit, date}
	t.Cleanup(func() { version, commit, date = old[0], old[1], old[2] })
	version, commit, date = "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T10:00:00Z"
	_, stdout, _ := runCLI("version", "-json")
	var b build
	if err := json.Unmarshal([]byte(stdout), &b); err != nil {
		t.Fatal(err)
	}
	if b.Version != version || b.Commit != commit || b.Date != date {
		t.Errorf("version -json = %+v, want the ldflags values", b)
	}
}

func first(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// The README shows `sluice --help` as it is.
func TestReadmeShowsHelp(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "$ sluice --help\n")
	block, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatal("README.md has no ```console block starting with $ sluice --help")
	}
	if _, stdout, _ := runCLI("--help"); block != stdout {
		t.Errorf("README.md's `sluice --help` differs from the output; paste this:\n%s", stdout)
	}
}
