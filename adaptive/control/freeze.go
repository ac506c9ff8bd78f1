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
