package adaptive

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// TestClientDeadlineWithDefaultQueue: with the default queue, a request
// whose client sends the SDKs' own timeout (600 s) and one that sends no
// timeout both wait 15 s for a permit and are served, where a shorter
// deadline of Sluice's own would have refused them; a client with a 2 s
// timeout is refused at its own deadline.
func TestClientDeadlineWithDefaultQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2, settings.DefaultQueue())
	// The holders are the waiters' own tenants, so their permits go to
	// the queue when they end (keep.go keeps none for them).
	a, b := h.arrive(Flow{Tenant: 1}), h.arrive(Flow{Tenant: 2})
	sdk := h.arrive(Flow{Tenant: 1, MaxWait: 600 * time.Second})
	plain := h.arrive(Flow{Tenant: 2})
	short := h.arrive(Flow{Tenant: 3, MaxWait: 2 * time.Second})
	for _, r := range []*hreq{sdk, plain, short} {
		h.wantState(r, hQueued, "request arriving at a full provider")
	}
	if got := short.deadline.Sub(short.enq); got != 2*time.Second {
		t.Fatalf("a 2 s client timeout: deadline in %v, want 2s", got)
	}
	h.clk.Advance(2 * time.Second)
	h.expire()
	h.wantState(short, hRefused, "the 2 s client at its deadline")
	if !errors.Is(short.err, ErrQueueTimeout) {
		t.Fatalf("the 2 s client: err %v, want ErrQueueTimeout", short.err)
	}
	h.clk.Advance(13 * time.Second)
	h.expire()
	h.finish(a, 0)
	h.finish(b, 0)
	h.poll()
	h.wantState(sdk, hHeld, "the SDK client (600 s timeout) after 15 s in the queue")
	h.wantState(plain, hHeld, "a client without a timeout after 15 s in the queue")
}
