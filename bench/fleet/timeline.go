package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// timeline samples the fleet every 100 ms for the run's duration, fires
// the configured events, and measures what follows them.
func (r *run) timeline(ctx context.Context) {
	c, res := r.cfg, r.res
	n := len(r.reps)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var ev events
	var frozeAt time.Duration
	var dropped bool
	var lossBefore []float64
	lastPrint := time.Duration(-time.Second)
	for ctx.Err() == nil {
		<-t.C
		at := time.Since(r.start)
		// Peaks are measured while the load runs, not while every client
		// is cut at the end (the provider notices a cut stream only at
		// its next token, so it then counts some twice).
		if at > c.Duration-300*time.Millisecond {
			break
		}
		r.fire(at, &ev)
		s := r.sample(ctx, at)
		res.Samples = append(res.Samples, s)
		if ev.killT > 0 && res.RecoveredAfterKill == 0 {
			if s.Provider < c.Ceiling-1 {
				dropped = true
			} else if dropped {
				res.RecoveredAfterKill = at - ev.killT
				fmt.Fprintf(c.Out, "t=%5.1fs the fleet is back at %d in flight, %.1fs after the kill\n", at.Seconds(), s.Provider, res.RecoveredAfterKill.Seconds())
			}
		}
		if ev.downT > 0 && ev.upT == 0 && at > ev.downT+c.Heartbeat {
			for i := range n {
				res.MaxInflightDegraded[i] = max(res.MaxInflightDegraded[i], s.Inflight[i])
				res.CapDegraded[i] = max(res.CapDegraded[i], s.Cap[i])
			}
		}
		if ev.upT > 0 && res.ResumedAfter == 0 && allCoordinated(s, r) {
			res.ResumedAfter = at - ev.upT
			fmt.Fprintf(c.Out, "t=%5.1fs every replica coordinated again, %.1fs after Redis came back\n", at.Seconds(), res.ResumedAfter.Seconds())
		}
		// The 429 reaches the provider when r1 admits it (it may queue):
		// the freeze starts when r1 shows it; each replica's loss part
		// is watched from then until shortly before it ends.
		if ev.freezeT > 0 && frozeAt == 0 && s.Frozen[0] {
			frozeAt, lossBefore = at, make([]float64, n)
			res.LossAtFreeze = lossBefore
		}
		if frozeAt > 0 && at < frozeAt+c.RetryAfter-200*time.Millisecond {
			for i := range n {
				if s.Frozen[i] && res.Frozen[i] == 0 {
					// From here on (the first sample showing the freeze),
					// its loss part must not rise.
					res.Frozen[i] = at - frozeAt + 1 // +1ns: seen (in the same sample as r1: 0)
					lossBefore[i] = s.Loss[i]
				}
				if res.Frozen[i] > 0 && s.Loss[i] > lossBefore[i] {
					res.LimitRose[i] = true
				}
			}
			res.LossAtThaw = s.Loss
		}
		if at-lastPrint >= time.Second {
			lastPrint = at
			fmt.Fprintln(c.Out, r.line(s))
		}
	}
	res.FreezeSent = frozeAt
	res.PeakProvider = max(res.PeakBeforeKill, r.sim.Stats().MaxOpen)
	if ev.killT > 0 {
		res.PeakAfterKill = r.sim.Stats().MaxOpen
	}
}

// events are the times (since the start) the configured events fired.
type events struct{ killT, downT, upT, freezeT time.Duration }

// fire starts the events due at at.
func (r *run) fire(at time.Duration, ev *events) {
	c, n := r.cfg, len(r.reps)
	switch {
	case c.KillAt > 0 && ev.killT == 0 && at >= c.KillAt:
		r.res.PeakBeforeKill = r.sim.Stats().MaxOpen
		r.sim.ResetMax()
		r.reps[n-1].kill()
		r.stopLoad[n-1]() // its clients see their connections refused from now on
		ev.killT = at
		fmt.Fprintf(c.Out, "t=%5.1fs kill -9 %s\n", at.Seconds(), r.reps[n-1].name)
	case c.RedisDownAt > 0 && ev.downT == 0 && at >= c.RedisDownAt:
		r.redis.stop()
		ev.downT = at
		fmt.Fprintf(c.Out, "t=%5.1fs redis-server stopped\n", at.Seconds())
	case c.RedisUpAt > 0 && ev.downT > 0 && ev.upT == 0 && at >= c.RedisUpAt:
		if err := r.redis.start(); err != nil {
			fmt.Fprintf(c.Out, "t=%5.1fs redis-server did not restart: %v\n", at.Seconds(), err)
		}
		ev.upT = at
		fmt.Fprintf(c.Out, "t=%5.1fs redis-server started again (empty)\n", at.Seconds())
	case c.FreezeAt > 0 && ev.freezeT == 0 && at >= c.FreezeAt && len(r.res.Samples) > 0:
		go r.sendFreeze()
		ev.freezeT = at
		fmt.Fprintf(c.Out, "t=%5.1fs one request through r1 answered 429 Retry-After %s by the provider\n", at.Seconds(), c.RetryAfter)
	}
}

// sample reads the provider and every replica.
func (r *run) sample(ctx context.Context, at time.Duration) Sample {
	n := len(r.reps)
	s := Sample{At: at, Provider: r.sim.Stats().Open, Inflight: make([]int, n), Cap: make([]int, n), Limit: make([]int, n),
		Loss: make([]float64, n), Frozen: make([]bool, n), State: make([]string, n)}
	for i, rep := range r.reps {
		s.Inflight[i], s.Cap[i], s.State[i] = -1, -1, "dead"
		if rep.killed {
			continue
		}
		v, err := rep.status(ctx)
		if err != nil {
			s.State[i] = "unreachable"
			continue
		}
		p, cl := v.Providers[0], v.Cluster
		s.Inflight[i], s.Limit[i], s.Cap[i], s.State[i] = p.Inflight, p.Limit, cl.Providers[0].Cap, cl.State
		s.Frozen[i] = p.FrozenUntil != nil
		if p.Components.Loss != nil {
			s.Loss[i] = *p.Components.Loss
		}
	}
	return s
}

func allCoordinated(s Sample, r *run) bool {
	for i, rep := range r.reps {
		if !rep.killed && s.State[i] != "coordinated" {
			return false
		}
	}
	return true
}

// line prints a sample: the provider's in flight against the ceiling,
// then each replica's in flight, cap, effective limit and state.
func (r *run) line(s Sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%5.1fs provider in flight %3d / ceiling %d |", s.At.Seconds(), s.Provider, r.cfg.Ceiling)
	for i, rep := range r.reps {
		if s.Inflight[i] < 0 {
			fmt.Fprintf(&b, " %s %s |", rep.name, s.State[i])
			continue
		}
		fmt.Fprintf(&b, " %s %3d (cap %2d, limit %2d, %s) |", rep.name, s.Inflight[i], s.Cap[i], s.Limit[i], s.State[i])
	}
	return strings.TrimSuffix(b.String(), " |")
}
