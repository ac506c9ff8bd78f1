package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/vtime"

	"github.com/sluicehq/sluice/settings"
)

// An upstream's Retry-After freezes limit growth for at most control.MaxRetryAfter
// through what a request's Finish feeds too (the path the proxy uses).
func TestRetryAfterCappedThroughPermit(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	s := settings.DefaultLimit()
	s.Algorithm = settings.AlgorithmAIMD
	ctrl, err := control.New(s, clk)
	if err != nil {
		t.Fatal(err)
	}
	l := testLimiter(50, 10, time.Second, ctrl)
	p := grant(t, l)
	at := clk.Now()
	p.Finish(at, Outcome{Kind: OutcomeDrop, Drop: control.DropRateLimit, RetryAfter: 999999999 * time.Second})
	if got, want := l.Stats().Controller.FrozenUntil, at.Add(control.MaxRetryAfter); !got.Equal(want) {
		t.Fatalf("FrozenUntil = %v, want %v", got, want)
	}
}
