package proxy

import (
	"sync"
	"sync/atomic"
	"time"
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

// The model label of sluice_tokens_total is chosen by clients, so its
// values are bounded per provider, and by traffic rather than by arrival:
// a name gets its own series while there is room for one (at most
// maxModelsPerProvider), and once the table is full a new name takes the
// place of the name with the fewest answers over the last one to two
// modelWindows, if it has had more than that name over the same time and
// at least modelDisplaceAfter answers. Until then its answers count as
// "other". So names sent once each, however many and however early, never
// keep a real model out for longer than its next few answers, and a model
// still in use keeps its series; a name that stops being used gives its
// place up to one that is used. Names empty, over 128 bytes or not UTF-8
// never get a series (empty counts as "unknown", the rest as "other").
const (
	maxModelsPerProvider = 64
	// maxModelCandidates bounds the names waiting for a place, each with
	// its recent answers; when it is full the one with the fewest is
	// forgotten.
	maxModelCandidates = 64
	modelDisplaceAfter = 5
	modelBusy          = 1024 // answers in a window past which a model's are not counted (modelTokens.count)
	modelWindow        = 10 * time.Minute
)

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
	other   *modelTokens
	unknown atomic.Pointer[modelTokens] // created at the first answer without a model

	// Guarded by modelMu: writers of models, the names waiting for a
	// place, and the start of the current window of answer counts.
	modelMu    sync.Mutex
	candidates map[string]*modelCount
	// windowStart is when the current window of answer counts began (Unix
	// ns; 0: no answer yet). Written under modelMu; read without it by
	// the answers of known models, which roll the window when it is over,
	// so the counts a model keeps its place by are its recent ones.
	windowStart atomic.Int64
}

// modelTokens are one model's counters and its answers in the current and
// the previous window (modelWindow), by which it keeps its place.
type modelTokens struct {
	in, out prometheus.Counter
	name    string
	cur     atomic.Int64
	prev    int64 // guarded by modelMu
}

// count counts an answer in the current window, up to modelBusy: past it
// the model keeps its place against any name that has not had as many, and
// its answers cost a read of the count rather than a write every core
// contends for.
func (t *modelTokens) count() {
	if t.cur.Load() < modelBusy {
		t.cur.Add(1)
	}
}

// modelCount is a name without a series yet: its answers in the current
// and the previous window.
type modelCount struct{ cur, prev int64 }

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
	pm.candidates = make(map[string]*modelCount)
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
		name: model,
		in:   pm.tokens.WithLabelValues(pm.name, model, "input"),
		out:  pm.tokens.WithLabelValues(pm.name, model, "output"),
	}
}

// modelTokens returns the counters of one successful answer's request
// model, at now. The common case is one lock-free map read, a read of the
// window's start and an atomic add: model strings come interned from
// feedback.InspectRequest, so nothing allocates. A name without a series,
// or the first answer after a window ends, takes the lock: a new name may
// get a place (see maxModelsPerProvider), else it counts as other.
func (pm *providerMetrics) modelTokens(model string, now time.Time) *modelTokens {
	if model == "" {
		if t := pm.unknown.Load(); t != nil {
			return t
		}
		pm.modelMu.Lock()
		defer pm.modelMu.Unlock()
		if pm.unknown.Load() == nil {
			pm.unknown.Store(pm.newModel(modelUnknown))
		}
		return pm.unknown.Load()
	} else if len(model) > 128 || !utf8.ValidString(model) {
		return pm.other
	}
	if t := (*pm.models.Load())[model]; t != nil && now.UnixNano()-pm.windowStart.Load() < int64(modelWindow) {
		t.count()
		return t
	}
	pm.modelMu.Lock()
	defer pm.modelMu.Unlock()
	pm.rollLocked(now)
	cur := *pm.models.Load()
	if t := cur[model]; t != nil {
		t.count()
		return t
	}
	var drop *modelTokens
	if len(cur) >= maxModelsPerProvider {
		c := pm.candidateLocked(model)
		c.cur++
		if c.cur+c.prev < modelDisplaceAfter {
			return pm.other
		}
		for _, t := range cur {
			if drop == nil || t.cur.Load()+t.prev < drop.cur.Load()+drop.prev {
				drop = t
			}
		}
		if drop.cur.Load()+drop.prev >= c.cur+c.prev {
			return pm.other
		}
		delete(pm.candidates, model)
	}
	next := make(map[string]*modelTokens, len(cur)+1)
	for k, v := range cur {
		if v != drop {
			next[k] = v
		}
	}
	t := pm.newModel(model)
	t.cur.Add(1)
	next[model] = t
	pm.models.Store(&next)
	if drop != nil {
		// Its counts are lost with its series, as a removed provider's
		// are; an answer that looked it up just before counts nowhere.
		pm.tokens.DeleteLabelValues(pm.name, drop.name, "input")
		pm.tokens.DeleteLabelValues(pm.name, drop.name, "output")
	}
	return t
}

// candidateLocked returns the count of a name waiting for a place, making
// room for it when the table is full by forgetting the one with the
// fewest answers.
func (pm *providerMetrics) candidateLocked(model string) *modelCount {
	if c := pm.candidates[model]; c != nil {
		return c
	}
	if len(pm.candidates) >= maxModelCandidates {
		var low string
		var lc *modelCount
		for name, c := range pm.candidates {
			if lc == nil || c.cur+c.prev < lc.cur+lc.prev {
				low, lc = name, c
			}
		}
		delete(pm.candidates, low)
	}
	c := &modelCount{}
	pm.candidates[model] = c
	return c
}

// rollLocked starts a new window of answer counts when the current one is
// over: the current counts become the previous ones (none when more than a
// window passed since).
func (pm *providerMetrics) rollLocked(now time.Time) {
	if pm.windowStart.Load() == 0 {
		pm.windowStart.Store(now.UnixNano())
		return
	}
	since := time.Duration(now.UnixNano() - pm.windowStart.Load())
	if since < modelWindow {
		return
	}
	keep := since < 2*modelWindow
	pm.windowStart.Store(now.UnixNano())
	for _, t := range *pm.models.Load() {
		n := t.cur.Swap(0)
		t.prev = 0
		if keep {
			t.prev = n
		}
	}
	for name, c := range pm.candidates {
		if !keep || c.cur == 0 {
			delete(pm.candidates, name)
			continue
		}
		c.prev, c.cur = c.cur, 0
	}
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
