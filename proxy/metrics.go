package proxy

import (
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Histogram buckets, in seconds. LLM latencies span four orders of
// magnitude: a cached short prompt answers in tens of milliseconds, a long
// prompt on a loaded provider in tens of seconds.
var (
	// ttftBuckets: 10 ms .. 60 s.
	ttftBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60}
	// tpotBuckets: time per output token, 2.5 ms (400 tokens/s) .. 2.5 s.
	// Decoding is rarely slower than a few tokens per second; the 10 ms ..
	// 60 s range of TTFT would put nearly every stream in its first buckets.
	tpotBuckets = []float64{0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5}
	// queueWaitBuckets: most requests do not wait (0 lands in the first
	// bucket); waits are bounded by queue.max_wait.
	queueWaitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// durationBuckets: admission to the end of the response, up to the
	// default 10m total timeout.
	durationBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}
)

// maxModelsPerProvider bounds the model label of sluice_tokens_total: the
// model is chosen by clients, so past this many distinct values per
// provider (or for a value that is empty, over 128 bytes or not UTF-8) it
// is counted as "other".
const maxModelsPerProvider = 64

// Label values of the model label that are not a model name.
const (
	modelOther   = "other"
	modelUnknown = "unknown"
)

var responseClassLabel = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Metrics is the request path's Prometheus instrumentation: counters and
// histograms updated per request through handles whose label values were
// resolved when the config was applied. Create it with NewMetrics on the
// registry the admin listener serves and pass it in Options.Metrics; one
// Metrics serves one Server. State that mirrors the limiters (limits,
// in-flight, queue depth, drops) is not here: the admin package reads it at
// scrape time, so it costs the request path nothing.
type Metrics struct {
	requests  *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	responses *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	unrouted  prometheus.Counter
	queueWait *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	tpot      *prometheus.HistogramVec
	duration  *prometheus.HistogramVec
	// connsClosed counts client connections the connection caps closed,
	// by reason (connReasonLabel), resolved once.
	connsClosedVec *prometheus.CounterVec
	connsClosed    [numConnReasons]prometheus.Counter

	mu         sync.Mutex
	byProvider map[string]*providerMetrics
	classes    map[string][]string // class label values resolved, by provider
}

// NewMetrics creates the request path's metrics and registers them on reg
// (never the global default registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "Requests that got a permit, by provider and how they ended (end: complete, client_gone, upstream_unreachable, first_token_timeout, upstream_timeout, upstream_bad_response, idle_timeout, total_timeout, upstream_broke, shutdown, aborted).",
		}, []string{"provider", "end"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rejected_requests_total",
			Help: "Requests that never got a permit, by provider, reason and class (over_share: answered 429, the provider had capacity but the request's class or tenant was at its share; queue_full, queue_timeout, queue_deadline, displaced: answered 503, the provider was at its limit; client_gone: the client left while queued; shutting_down: answered 503).",
		}, []string{"provider", "reason", "class"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_responses_total",
			Help: "Upstream responses (headers received), by provider and status class (1xx..5xx).",
		}, []string{"provider", "class"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tokens_total",
			Help: "Tokens of successful (2xx) responses by provider, request model and type (input: provider usage, else Sluice's estimate; output: provider usage, else output deltas).",
		}, []string{"provider", "model", "type"}),
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_unrouted_requests_total",
			Help: "Requests that matched no provider (answered 404).",
		}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_queue_wait_seconds",
			Help:    "Time requests that got a permit spent waiting for it (0 on the fast path), by provider and class.",
			Buckets: queueWaitBuckets,
		}, []string{"provider", "class"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_time_to_first_token_seconds",
			Help:    "Time from dispatch upstream (permit granted) to the first output token of a stream.",
			Buckets: ttftBuckets,
		}, []string{"provider"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_time_per_output_token_seconds",
			Help:    "Time per output token after the first, per successful stream with at least two output deltas.",
			Buckets: tpotBuckets,
		}, []string{"provider"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_request_duration_seconds",
			Help:    "Time a request held its permit: from admission to the end of its response.",
			Buckets: durationBuckets,
		}, []string{"provider"}),
		connsClosedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_client_connections_closed_total",
			Help: "Client connections closed by the connection caps, by reason (idle_per_ip, idle_max_connections: an idle connection closed to make room for a new one; refused_per_ip: answered 429, refused_max_connections: answered 503, a new connection refused because every connection in its scope was active).",
		}, []string{"reason"}),
		byProvider: make(map[string]*providerMetrics),
		classes:    make(map[string][]string),
	}
	for i, l := range connReasonLabel {
		m.connsClosed[i] = m.connsClosedVec.WithLabelValues(l)
	}
	for _, c := range []prometheus.Collector{
		m.requests, m.rejected, m.responses, m.tokens, m.unrouted,
		m.queueWait, m.ttft, m.tpot, m.duration, m.connsClosedVec,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// providerMetrics holds one provider's metric handles, label values
// resolved once. Every label combination exists from the first Apply, so
// rates work from the first increment.
type providerMetrics struct {
	name string
	// outcomes counts each outcome of an admitted request under
	// sluice_requests_total{end}; rejections are counted per class
	// (classMetrics), and rows of that kind are nil here.
	outcomes  [numOutcomes]prometheus.Counter
	responses [len(responseClassLabel)]incer
	ttft      prometheus.Observer
	tpot      prometheus.Observer
	duration  prometheus.Observer

	tokens  *prometheus.CounterVec
	models  atomic.Pointer[map[string]*modelTokens] // copy on write
	modelMu sync.Mutex                              // serialises writers of models
	other   *modelTokens
}

type modelTokens struct{ in, out prometheus.Counter }

// forProvider returns the handles of provider name, creating them the
// first time. Providers that stay configured across reloads keep theirs.
func (m *Metrics) forProvider(name string) *providerMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pm := m.byProvider[name]; pm != nil {
		return pm
	}
	pm := &providerMetrics{name: name, tokens: m.tokens}
	for o := outcome(0); o < numOutcomes; o++ {
		if outcomes[o].admitted {
			pm.outcomes[o] = m.requests.WithLabelValues(name, o.String())
		}
	}
	for c := 1; c < len(responseClassLabel); c++ {
		pm.responses[c] = m.responses.WithLabelValues(name, responseClassLabel[c])
	}
	// Statuses outside 100..599 are counted as "other" only when they occur.
	pm.responses[0] = lazyCounter{vec: m.responses, labels: []string{name, responseClassLabel[0]}}
	pm.ttft = m.ttft.WithLabelValues(name)
	pm.tpot = m.tpot.WithLabelValues(name)
	pm.duration = m.duration.WithLabelValues(name)
	pm.other = pm.newModel(modelOther)
	empty := map[string]*modelTokens{}
	pm.models.Store(&empty)
	m.byProvider[name] = pm
	return pm
}

// retain deletes the series of providers not in names (removed by a
// reload). Requests still running on the old snapshot update detached
// handles; their counts are lost with the series.
func (m *Metrics) retain(names map[string]*provider) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.byProvider {
		if _, ok := names[name]; ok {
			continue
		}
		delete(m.byProvider, name)
		delete(m.classes, name)
		l := prometheus.Labels{"provider": name}
		m.requests.DeletePartialMatch(l)
		m.rejected.DeletePartialMatch(l)
		m.responses.DeletePartialMatch(l)
		m.tokens.DeletePartialMatch(l)
		m.queueWait.DeletePartialMatch(l)
		m.ttft.DeletePartialMatch(l)
		m.tpot.DeletePartialMatch(l)
		m.duration.DeletePartialMatch(l)
	}
}

func (pm *providerMetrics) newModel(model string) *modelTokens {
	return &modelTokens{
		in:  pm.tokens.WithLabelValues(pm.name, model, "input"),
		out: pm.tokens.WithLabelValues(pm.name, model, "output"),
	}
}

// modelTokens returns the token counters of a request model. The common
// case is one lock-free map read: model strings come interned from
// feedback.InspectRequest, so nothing allocates. A model seen for the first
// time takes the lock and copies the map (bounded by
// maxModelsPerProvider).
func (pm *providerMetrics) modelTokens(model string) *modelTokens {
	if model == "" {
		model = modelUnknown
	} else if len(model) > 128 || !utf8.ValidString(model) {
		return pm.other
	}
	if t := (*pm.models.Load())[model]; t != nil {
		return t
	}
	pm.modelMu.Lock()
	defer pm.modelMu.Unlock()
	cur := *pm.models.Load()
	if t := cur[model]; t != nil {
		return t
	}
	if len(cur) >= maxModelsPerProvider {
		return pm.other
	}
	next := make(map[string]*modelTokens, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	t := pm.newModel(model)
	next[model] = t
	pm.models.Store(&next)
	return t
}

// incer is the part of a counter the request path uses.
type incer interface{ Inc() }

// lazyCounter resolves its child on first use: for label values that are
// rare and should not appear as a zero series.
type lazyCounter struct {
	vec    *prometheus.CounterVec
	labels []string
}

func (c lazyCounter) Inc() { c.vec.WithLabelValues(c.labels...).Inc() }
