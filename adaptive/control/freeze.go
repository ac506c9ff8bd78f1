package control

import "time"

// FreezeGrowth stops the limit from growing until until: a fleet
// coordinator calls it when another replica saw a Retry-After or cut its
// limit. It does what a Retry-After seen here does to growth (Observe,
// Dropped): the freeze deadline moves to until if that is later, and the
// loss part is pinned to the effective limit so no part can raise it
// meanwhile. Unlike a local drop it neither cuts nor records a drop: the
// congestion was measured elsewhere. Safe for concurrent use.
func (c *adaptiveController) FreezeGrowth(until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !until.After(c.frozenUntil) {
		return
	}
	c.frozenUntil = until
	c.loss.pin(c.eff)
	c.recompute()
}

// MaxRetryAfter is the longest a provider's Retry-After (or retry-after-ms)
// freezes limit growth. A longer wait is cut to it where the sample is
// applied (the controller), so an upstream that answers "Retry-After:
// 999999999" freezes growth for five minutes, not thirty years. Five
// minutes covers the per-minute windows providers rate-limit by, with
// margin; a provider that still refuses after it sends another 429, which
// cuts the limit and freezes again. The freeze only stops growth, so a
// shorter cap costs at most one more drop per cap interval, and no
// operator needs to choose it.
const MaxRetryAfter = 5 * time.Minute

// capRetryAfter bounds a Retry-After to [0, MaxRetryAfter].
func capRetryAfter(d time.Duration) time.Duration {
	return min(max(d, 0), MaxRetryAfter)
}
