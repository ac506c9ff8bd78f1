// Package controltest holds the controller scenarios that the tests of
// adaptive/control and of adaptive (which drives its upstreams'
// controllers) share, in the virtual time of internal/vtime. Only _test.go
// files import it; the import-rule test in cmd/sluice checks that.
package controltest

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/vtime"
)

// DrivePacing feeds c what a provider with a request-rate limit of about
// 3/s says, until c paces dispatches: answers at a concurrency it refused
// at before, so the refusals are not about concurrency, then a refusal
// again.
func DrivePacing(t testing.TB, c control.Controller, clk *vtime.Clock) {
	t.Helper()
	first := func(inflight int) {
		c.Observe(control.Sample{Kind: control.FirstToken, Now: clk.Now(), Dispatched: clk.Now(), InflightAtDispatch: inflight, TTFT: 300 * time.Millisecond})
	}
	drop := func(inflight int) {
		c.Observe(control.Sample{Kind: control.Dropped, Now: clk.Now(), Dispatched: clk.Now(), InflightAtDispatch: inflight, Drop: control.DropRateLimit})
	}
	for range 30 {
		clk.Advance(time.Second / 3)
		first(15)
	}
	drop(15)
	for range 3 {
		clk.Advance(time.Second / 3)
		first(15)
	}
	clk.Advance(3 * time.Second)
	drop(12)
	if c.State().Pace == 0 {
		t.Fatal("the controller does not pace")
	}
}
