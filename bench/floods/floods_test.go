package floods

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The client counts what it gets, and the idle flood's connections stay
// open after their one request.
func TestRunCountsTheClientAndTheFlood(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.Contains(r.UserAgent(), "Go-http-client") && r.ContentLength > 1000 {
			w.WriteHeader(http.StatusServiceUnavailable) // the client's requests: refused
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	r, err := Run(context.Background(), Config{Target: srv.URL + "/openai", Flood: Idle, Conns: 5, From: []string{"127.0.0.1"},
		Workers: 2, Duration: 100 * time.Millisecond, BodySize: 2000, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Opened != 5 || r.Held != 5 {
		t.Errorf("flood: %d opened, %d held, want 5 and 5", r.Opened, r.Held)
	}
	if r.Requests == 0 || r.OK != 0 || r.Statuses[503] != r.Requests {
		t.Errorf("client: %d requests, %d ok, statuses %v; want every one 503", r.Requests, r.OK, r.Statuses)
	}
	if _, err := Run(context.Background(), Config{Target: srv.URL, Flood: "bogus"}); err == nil {
		t.Error("an unknown flood runs")
	}
}
