package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// Fleet-wide rate limits: each provider's own quota (rate: rpm, tpm,
// input_tpm, output_tpm) is one token bucket per dimension in Redis,
// refilled in Redis time, and every replica leases tokens from it in
// batches into local pools that its requests reserve from without a round
// trip (adaptive.Rates.JoinFleet explains the accounting). The sync loop
// below runs every rateSync and whenever a pool refused a request: one
// Lua script per sync for every provider hands back surpluses and debts
// and leases what the pools need.
//
// Each sync carries a sequence number the store keeps per replica with its
// answer: a sync whose answer was lost (a timeout) is sent again as it was
// and answered from the store, never applied twice, so tokens handed back
// or charged are counted exactly once. When Redis cannot be reached the
// quotas are local, at limit / replicas last seen, until a sync gets
// through.

// rateSyncOf is the sync interval for heartbeat hb: a tenth of it, between
// 10 ms and 250 ms (100 ms with the default heartbeat).
func rateSyncOf(hb time.Duration) time.Duration {
	return min(max(hb/10, 10*time.Millisecond), 250*time.Millisecond)
}

// rateBatch is one sync: the plans of the providers it covers, sent until
// answered.
type rateBatch struct {
	seq   int64
	names []string
	plans [][]adaptive.FleetDim
	rates []*adaptive.Rates
}

// rateLoop syncs the fleet-wide quotas until ctx ends.
func (c *Coordinator) rateLoop(ctx context.Context) {
	if c.o.Rates == nil {
		return
	}
	every := rateSyncOf(c.hb())
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	c.syncRates(ctx, every)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.rateWake:
			// A pool refused a request: sync now, but not more than four
			// times per interval while the fleet's bucket is empty.
			if d := every/4 - time.Since(last); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		last = time.Now()
		c.syncRates(ctx, every)
	}
}

// fleetRates returns the rate layers whose own quota limits something,
// joined to the fleet, by name.
func (c *Coordinator) fleetRates(every time.Duration, n int) map[string]*adaptive.Rates {
	out := make(map[string]*adaptive.Rates)
	for name, r := range c.o.Rates() {
		if r.Settings().PerMinute.Any() {
			r.JoinFleet(c.rateWake, n, every)
			out[name] = r
		}
	}
	return out
}

// replicasForRates is the fleet size quotas are split by: the live
// replicas at the last heartbeat, else the expected number.
func (c *Coordinator) replicasForRates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastN > 0 {
		return c.lastN
	}
	return c.o.Settings.ExpectedReplicas
}

// syncRates runs one sync: the pending batch if the last one was not
// answered, else a new plan for every fleet-wide quota.
func (c *Coordinator) syncRates(ctx context.Context, every time.Duration) {
	n := c.replicasForRates()
	rates := c.fleetRates(every, n)
	b := c.ratePending
	if b == nil {
		if len(rates) == 0 {
			return
		}
		b = c.planRates(rates, n)
	}
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	defer cancel()
	err := c.sendRates(cctx, b)
	if err == nil {
		c.ratePending = nil
		c.rateSyncs.Add(1)
		return
	}
	if ctx.Err() != nil {
		c.ratePending = b // stopping: leave() sends it
		return
	}
	c.ratePending = b
	c.rateFailures.Add(1)
	for _, r := range rates {
		r.FleetLocal(n)
	}
	c.degrade(fmt.Errorf("rate sync: %w", err))
}

// planRates builds a batch of every quota's plan, providers in name order.
func (c *Coordinator) planRates(rates map[string]*adaptive.Rates, n int) *rateBatch {
	c.rateSeq++
	b := &rateBatch{seq: c.rateSeq}
	for _, name := range sortedNames(rates) {
		r := rates[name]
		if p := r.FleetPlan(n); len(p) > 0 {
			b.names, b.plans, b.rates = append(b.names, name), append(b.plans, p), append(b.rates, r)
		}
	}
	return b
}

func sortedNames(m map[string]*adaptive.Rates) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// sendRates runs b's script and applies the answer.
func (c *Coordinator) sendRates(ctx context.Context, b *rateBatch) error {
	if len(b.names) == 0 {
		return nil
	}
	ks := make([]string, 0, 2*len(b.names))
	args := []any{c.o.ReplicaID + "/" + c.nonce, b.seq, c.deadAfter().Microseconds(), len(b.names)}
	for i, name := range b.names {
		ks = append(ks, c.k.rate(name), c.k.rateReplicas(name))
		args = append(args, len(b.plans[i]))
		for _, d := range b.plans[i] {
			args = append(args, int(d.Dim), d.Capacity, d.Window.Microseconds(), d.Give, d.Want, d.Held)
		}
	}
	res, err := rateScript.Run(ctx, c.rdb, ks, args...).Slice()
	if err != nil {
		return err
	}
	if len(res) != len(b.names) {
		return fmt.Errorf("cluster: rate sync answered %d values, want %d", len(res), len(b.names))
	}
	now := time.Now()
	for i := range b.names {
		s, _ := res[i].(string)
		if err := parseRateAnswer(s, b.plans[i]); err != nil {
			return err
		}
	}
	for i, r := range b.rates {
		r.FleetApply(now, b.plans[i])
	}
	return nil
}

// parseRateAnswer fills ds with "dim granted level,..." in plan order.
func parseRateAnswer(s string, ds []adaptive.FleetDim) error {
	parts := strings.Split(s, ",")
	if len(parts) != len(ds) {
		return fmt.Errorf("cluster: rate sync answer %q for %d dimensions", s, len(ds))
	}
	for i, p := range parts {
		f := strings.Fields(p)
		if len(f) != 3 || f[0] != strconv.Itoa(int(ds[i].Dim)) {
			return errors.New("cluster: malformed rate sync answer " + strconv.Quote(s))
		}
		g, e1 := strconv.ParseInt(f[1], 10, 64)
		l, e2 := strconv.ParseInt(f[2], 10, 64)
		if e1 != nil || e2 != nil || g < 0 {
			return errors.New("cluster: malformed rate sync answer " + strconv.Quote(s))
		}
		ds[i].Granted, ds[i].Level = g, l
	}
	return nil
}

// returnRates hands every pool back to the fleet when the replica leaves:
// the batch still pending, then what the pools hold. Best effort: tokens
// that cannot be returned refill in the fleet's bucket within a window.
func (c *Coordinator) returnRates(ctx context.Context) {
	if c.o.Rates == nil {
		return
	}
	if b := c.ratePending; b != nil {
		if err := c.sendRates(ctx, b); err != nil {
			return
		}
		c.ratePending = nil
	}
	c.rateSeq++
	b := &rateBatch{seq: c.rateSeq}
	for name, r := range c.o.Rates() {
		if joined, _ := r.InFleet(); !joined {
			continue
		}
		if p := r.FleetReturn(); len(p) > 0 {
			b.names, b.plans, b.rates = append(b.names, name), append(b.plans, p), append(b.rates, r)
		}
	}
	if err := c.sendRates(ctx, b); err != nil {
		c.log.Warn("cluster: handing rate tokens back failed; they refill in the fleet's bucket within a window", "error", err.Error())
	}
}

// RateStatus is one provider's fleet-wide quota on this replica.
type RateStatus struct {
	// Mode is "leased" (tokens leased from the fleet's bucket) or "local"
	// (Redis unreachable: limit / replicas on this replica).
	Mode string          `json:"mode"`
	Dims []RateDimStatus `json:"dims"`
}

// RateDimStatus is one dimension of a fleet-wide quota.
type RateDimStatus struct {
	Dim string `json:"dim"`
	// Held is what this replica's pool holds (negative: owes).
	Held int64 `json:"held"`
	// FleetLevel is the fleet's bucket at the last sync.
	FleetLevel int64 `json:"fleet_level"`
}

// rateStatus returns r's fleet-wide quota, or nil when it has none.
func rateStatus(r *adaptive.Rates) *RateStatus {
	joined, leased := r.InFleet()
	if !joined {
		return nil
	}
	st := &RateStatus{Mode: "local"}
	if leased {
		st.Mode = "leased"
	}
	l := adaptive.OwnLimits(r.Settings())
	ps := r.FleetStats()
	for d := range adaptive.NumDims {
		if lim := [...]int64{l.Requests, l.Tokens, l.InputTokens, l.OutputTokens}[d]; lim > 0 {
			st.Dims = append(st.Dims, RateDimStatus{Dim: d.String(), Held: ps[d].Held, FleetLevel: ps[d].FleetLevel})
		}
	}
	return st
}
