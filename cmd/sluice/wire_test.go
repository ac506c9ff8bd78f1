package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// outOfStepUpstream answers each request with the JSON {"for": the
// request's X-Client} and then, in a second write, with a whole second
// answer nobody asked for ({"for": ..., "extra": true}): an upstream whose
// framing lies. conns counts the connections it accepted.
func outOfStepUpstream(t *testing.T, conns *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	answer := func(body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					who := req.Header.Get("X-Client")
					if _, err := io.WriteString(c, answer(`{"for":"`+who+`"}`)); err != nil {
						return
					}
					if _, err := io.WriteString(c, answer(`{"for":"`+who+`","extra":true}`)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

// Issue 27, finding L2 on the wire: two clients send requests in a row
// through bin/sluice to an upstream that sends an extra answer after each
// one. No client ever gets an answer that was not its own (another
// client's, or the extra one): the connection an extra answer was sent on
// is closed, not pooled.
func TestWireAnswersNeverCrossClients(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	_, base, logs := startServe(t, outOfStepUpstream(t, &conns), "1s")
	const perClient = 200
	var crossed, extra, failed atomic.Int64
	var wg sync.WaitGroup
	for _, who := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for range perClient {
				req, _ := http.NewRequest("POST", base+"/fake/v1/chat/completions", strings.NewReader(`{}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Client", who)
				resp, err := c.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				var got struct {
					For   string `json:"for"`
					Extra bool   `json:"extra"`
				}
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				switch {
				case err != nil || resp.StatusCode != 200:
					failed.Add(1)
				case got.For != who:
					crossed.Add(1)
				case got.Extra:
					extra.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d requests: %d got another client's answer, %d an answer nobody asked for, %d failed; the upstream saw %d connections",
		2*perClient, crossed.Load(), extra.Load(), failed.Load(), conns.Load())
	if crossed.Load() != 0 || extra.Load() != 0 || failed.Load() != 0 {
		t.Errorf("answers out of step reached clients (logs: %s)", logs)
	}
}
