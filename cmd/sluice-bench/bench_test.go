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

	"github.com/valyala/fasthttp"

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

// TestLoadCommandSDK runs SDK-style clients against a server that refuses
// every first attempt, and checks that the text summary shows both views.
func TestLoadCommandSDK(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Request.Header.Peek("x-stainless-retry-count")) == "0" {
			ctx.Response.Header.Set("X-Sluice-Rejected", "queue_full")
			ctx.Response.Header.Set("Retry-After-Ms", "1")
			ctx.SetStatusCode(503)
			return
		}
		if c := string(ctx.Request.Header.Peek("X-Sluice-Class")); c != "batch" {
			t.Errorf("X-Sluice-Class %q", c)
		}
		if bytes.Contains(ctx.PostBody(), []byte("max_tokens")) {
			t.Errorf("max_tokens sent: %s", ctx.PostBody()[:60])
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyString(`data: {"choices":[{"delta":{"content":"a"}}]}` + "\n\ndata: [DONE]\n\n")
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	url := "http://" + ln.Addr().String() + "/v1/chat/completions"
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"load", "-url", url, "-sdk", "openai", "-clients", "2", "-think", "0",
		"-duration", "300ms", "-output", "5", "-tenants", "2", "-header", "X-Sluice-Class: batch"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"rejected by Sluice: queue_full ", "of which SDK retries: ", "failed after retries 0", "2 attempts ", "call TTFT", "call total", "sk-tenant-1 "} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range [][]string{{"-sdk", "boto"}, {"-max-tokens", "lots"}, {"-header", "no colon"}} {
		if code := dispatch(context.Background(), append([]string{"load", "-url", url}, bad...), &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

func TestScenariosCommand(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), []string{"scenarios", "-short", "-q", "-timescale", "0.1", "-run", "capacity-step", "-shapes", "both", "-out", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, f := range []string{"capacity-step.md", "capacity-step-limit.svg", "capacity-step-no-max-tokens-limit.svg", "capacity-step.json", "README.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stdout.String(), "| gradient2 | max_tokens |") || !strings.Contains(stdout.String(), "| gradient2 | no max_tokens |") {
		t.Errorf("stdout lacks the table:\n%s", stdout.String())
	}
	if code := dispatch(context.Background(), []string{"scenarios", "-run", "nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown scenario: exit %d, want 2", code)
	}
	if code := dispatch(context.Background(), []string{"scenarios", "-shapes", "some"}, &stdout, &stderr); code != 2 {
		t.Errorf("unknown shapes: exit %d, want 2", code)
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
