package inproc

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
)

// One request through the stack reaches the provider, and /admin/status
// shows the provider Sluice was configured with.
func TestStackServesThroughSluice(t *testing.T) {
	t.Parallel()
	st, err := Start(Options{
		Sim: sim.Config{Schedule: []sim.Step{{Capacity: 4}}},
		Config: func(simURL string) *config.Config {
			p := config.DefaultProvider()
			p.Name, p.Upstream, p.Match.PathPrefix = "sim", simURL, "/sim"
			cfg := config.Default()
			cfg.Admin.Listen = config.AdminOff
			cfg.Tracing.Exporter = "none"
			cfg.Providers = []config.Provider{p}
			return cfg
		},
		Admin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	resp, err := http.Post(st.URL+"/sim/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if n := st.Sim.Stats().Requests; n != 1 {
		t.Errorf("the provider saw %d requests, want 1", n)
	}
	var doc struct {
		Providers []struct {
			Name string `json:"name"`
		} `json:"providers"`
	}
	if err := st.Status(&doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Providers) != 1 || doc.Providers[0].Name != "sim" {
		t.Errorf("/admin/status providers %+v, want one named sim", doc.Providers)
	}
	st.Close() // closing twice is closing once
}
