package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
)

func TestLoadCommand(t *testing.T) {
	s := sim.New(sim.Config{TimeScale: 0.01, Seed: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	defer s.Close()
	var stdout, stderr bytes.Buffer
	series := filepath.Join(t.TempDir(), "series.csv")
	code := dispatch(context.Background(), []string{"load", "-url", "http://" + ln.Addr().String() + "/v1/chat/completions",
		"-clients", "4", "-think", "1ms", "-duration", "400ms", "-output", "5", "-output-sigma", "0", "-sim-headers", "-json", "-series", series}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var sum load.Summary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, stdout.String())
	}
	if sum.OK == 0 || sum.Tokens != 5*sum.OK {
		t.Fatalf("summary %+v", sum)
	}
	csv, err := os.ReadFile(series)
	if err != nil || !strings.HasPrefix(string(csv), "second,started,ok,") {
		t.Fatalf("series: %v %q", err, csv)
	}
	if code := dispatch(context.Background(), []string{"load"}, &stdout, &stderr); code != 2 {
		t.Errorf("load without -url: exit %d, want 2", code)
	}
}

func TestScenariosCommand(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"scenarios", "-short", "-q", "-timescale", "0.1", "-run", "capacity-step", "-out", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, f := range []string{"capacity-step.md", "capacity-step-limit.svg", "capacity-step.json", "README.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stdout.String(), "| gradient2 |") {
		t.Errorf("stdout lacks the table:\n%s", stdout.String())
	}
	if code := dispatch(context.Background(), []string{"scenarios", "-run", "nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown scenario: exit %d, want 2", code)
	}
}

func TestOverheadFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"overhead", "-cases", "json-1,nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown case: exit %d, want 2", code)
	}
	if code := dispatch(context.Background(), []string{"overhead", "-sluice", "/nonexistent/sluice"}, &stdout, &stderr); code != 2 {
		t.Errorf("missing binary: exit %d, want 2", code)
	}
}
