package proxy

import (
	"slices"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// ConfigRules are the defaults and valid ranges of a provider's limit,
// queue, rate, retries and breaker blocks and of its upstreams: entries,
// as adaptive decides them, in the config package's terms. Pass them to
// config.Load, config.Parse, config.NewWatcher and Config.Validate.
// SeveralUpstreams is true: the request path serves upstreams: lists.
func ConfigRules() config.Rules {
	r := config.Rules{
		Limit: config.BlockRules[config.Limit]{
			Default: limitConfig(adaptive.DefaultSettings()),
			Complete: func(l config.Limit, set func(string) bool) config.Limit {
				return limitConfig(limitSettings(l).Complete(set))
			},
			Check:      func(l config.Limit) []config.Issue { return issues(limitSettings(l).Problems()) },
			Deprecated: adaptive.DeprecatedParams(),
		},
		Queue: config.BlockRules[config.Queue]{
			Default: queueConfig(adaptive.DefaultQueueSettings()),
			Complete: func(q config.Queue, set func(string) bool) config.Queue {
				return queueConfig(queueSettings(q).Complete(set))
			},
			Check: func(q config.Queue) []config.Issue { return issues(queueSettings(q).Problems()) },
		},
		Cluster: config.BlockRules[config.Cluster]{
			Default: clusterConfig(adaptive.DefaultFleetSettings()),
			Check:   func(c config.Cluster) []config.Issue { return issues(FleetSettings(c).Problems()) },
		},
	}
	admissionRules(&r)
	return r
}

// FleetSettings translates the cluster block's timings, for the fleet
// coordinator (adaptive/cluster) that cmd/sluice starts.
func FleetSettings(c config.Cluster) adaptive.FleetSettings {
	return adaptive.FleetSettings{Heartbeat: c.Heartbeat, LeaseTTL: c.LeaseTTL, ExpectedReplicas: c.ExpectedReplicas}
}

func clusterConfig(f adaptive.FleetSettings) config.Cluster {
	return config.Cluster{
		KeyPrefix: config.DefaultClusterKeyPrefix,
		Heartbeat: f.Heartbeat, LeaseTTL: f.LeaseTTL, ExpectedReplicas: f.ExpectedReplicas,
	}
}

func issues(ps []adaptive.Problem) []config.Issue {
	if len(ps) == 0 {
		return nil
	}
	is := make([]config.Issue, len(ps))
	for i, p := range ps {
		is[i] = config.Issue{Key: p.Param, Msg: p.Msg}
	}
	return is
}

// limiterSettings translates a provider's limit and queue blocks.
func limiterSettings(pc *config.Provider) adaptive.LimiterSettings {
	return adaptive.LimiterSettings{Limit: limitSettings(pc.Limit), Queue: queueSettings(pc.Queue)}
}

func limitSettings(l config.Limit) adaptive.Settings {
	return adaptive.Settings{
		Algorithm:     l.Algorithm,
		Ceiling:       l.Ceiling,
		Min:           l.Min,
		Initial:       l.Initial,
		TTFTTarget:    l.TTFTTarget,
		MinTokenRate:  l.MinTokenRate,
		Window:        l.Window,
		WindowSamples: l.WindowSamples,
		Smoothing:     l.Smoothing,
		LongWindow:    l.LongWindow,
		Backoff:       l.Backoff,
		Cooldown:      l.Cooldown,
		PrefillRate:   l.PrefillRate,
		Fleet:         l.Fleet,
	}
}

func limitConfig(s adaptive.Settings) config.Limit {
	return config.Limit{
		Algorithm:     s.Algorithm,
		Ceiling:       s.Ceiling,
		Min:           s.Min,
		Initial:       s.Initial,
		TTFTTarget:    s.TTFTTarget,
		MinTokenRate:  s.MinTokenRate,
		Window:        s.Window,
		WindowSamples: s.WindowSamples,
		Smoothing:     s.Smoothing,
		LongWindow:    s.LongWindow,
		Backoff:       s.Backoff,
		Cooldown:      s.Cooldown,
		PrefillRate:   s.PrefillRate,
		Fleet:         s.Fleet,
	}
}

func queueSettings(q config.Queue) adaptive.QueueSettings {
	s := adaptive.QueueSettings{
		MaxWaiting:          q.MaxWaiting,
		MaxWait:             q.MaxWait,
		DefaultClass:        q.DefaultClass,
		ClassHeader:         q.ClassHeader,
		TenantHeader:        q.TenantHeader,
		DeadlineHeader:      q.DeadlineHeader,
		RetryHeaders:        slices.Clone(q.RetryHeaders),
		MaxTenants:          q.MaxTenants,
		TenantMaxInflight:   q.TenantMaxInflight,
		SaturationTTFTRatio: q.SaturationTTFTRatio,
		SaturationHold:      q.SaturationHold,
	}
	for _, c := range q.Classes {
		s.Classes = append(s.Classes, adaptive.ClassSettings{Name: c.Name, MaxShare: c.MaxShare, SaturatedShare: c.SaturatedShare})
	}
	return s
}

func queueConfig(s adaptive.QueueSettings) config.Queue {
	q := config.Queue{
		MaxWaiting:          s.MaxWaiting,
		MaxWait:             s.MaxWait,
		DefaultClass:        s.DefaultClass,
		ClassHeader:         s.ClassHeader,
		TenantHeader:        s.TenantHeader,
		DeadlineHeader:      s.DeadlineHeader,
		RetryHeaders:        slices.Clone(s.RetryHeaders),
		MaxTenants:          s.MaxTenants,
		TenantMaxInflight:   s.TenantMaxInflight,
		SaturationTTFTRatio: s.SaturationTTFTRatio,
		SaturationHold:      s.SaturationHold,
	}
	for _, c := range s.Classes {
		q.Classes = append(q.Classes, config.QueueClass{Name: c.Name, MaxShare: c.MaxShare, SaturatedShare: c.SaturatedShare})
	}
	return q
}
