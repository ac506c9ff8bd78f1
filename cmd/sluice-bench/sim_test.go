package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/sim"
)

// syncBuffer is a bytes.Buffer safe for one writer and a polling reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestSimCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- dispatch(ctx, []string{"sim", "-listen", "127.0.0.1:0", "-schedule", "3,1@1h",
			"-timescale", "0.01", "-seed", "7", "-jitter", "0"}, &stdout, &stderr)
	}()
	addrRE := regexp.MustCompile(`listening on http://(\S+)`)
	var addr string
	for deadline := time.Now().Add(5 * time.Second); addr == ""; {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listen line; stderr: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("listening on %s", addr)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	req.Header.Set(sim.HeaderOutputTokens, "4")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(body), `"content":"tok "`); n != 4 {
		t.Errorf("%d tokens in %s", n, body)
	}
	tr.CloseIdleConnections()

	cancel() // as SIGINT would
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit code %d; stderr: %s", c, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sim did not stop")
	}
	var st sim.Stats
	if err := json.Unmarshal([]byte(stdout.String()), &st); err != nil {
		t.Fatalf("stdout is not stats JSON: %v: %q", err, stdout.String())
	}
	if st.Requests != 1 || st.Completed != 1 || st.Capacity != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestDispatchErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if c := dispatch(context.Background(), nil, &out, &errb); c != 2 {
		t.Errorf("no args: %d", c)
	}
	if c := dispatch(context.Background(), []string{"nope"}, &out, &errb); c != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Errorf("unknown: %d %s", c, errb.String())
	}
	for _, args := range [][]string{
		{"sim", "-schedule", "x"},
		{"sim", "-timescale", "0"},
		{"sim", "-fault", "boom"},
		{"sim", "-shape", "ps"},
		{"sim", "extra"},
	} {
		errb.Reset()
		if c := dispatch(context.Background(), args, &out, &errb); c != 2 {
			t.Errorf("%v: exit %d, stderr %s", args, c, errb.String())
		}
	}
	out.Reset()
	if c := dispatch(context.Background(), []string{"help"}, &out, &errb); c != 0 || !strings.Contains(out.String(), "sim") {
		t.Errorf("help: %d %s", c, out.String())
	}
}
