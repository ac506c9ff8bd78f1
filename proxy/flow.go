package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

// flowRules read a request's flow (tenant, class, deadline, retry, cost)
// from its headers and body facts, for one provider's queue. They are
// built when a config is applied; reading a flow allocates nothing.
type flowRules struct {
	classHeader    string
	tenantHeader   string
	deadlineHeader string
	timeoutHeaders []string
	retryHeaders   []string
	classes        map[string]uint8 // lower-case name -> adaptive.Flow.Class
	names          []string         // class names, in priority order
	def            int              // index of the default class
	// own are the headers that speak to Sluice only and are not forwarded
	// upstream: the flow headers in its namespace (X-Sluice-*), the
	// tenant header whatever its name, and the headers clients: matches.
	own [][]byte
}

func newFlowRules(q settings.Queue) *flowRules {
	fr := &flowRules{
		classHeader:    q.ClassHeader,
		deadlineHeader: q.DeadlineHeader,
		timeoutHeaders: q.TimeoutHeaders,
		retryHeaders:   q.RetryHeaders,
		classes:        make(map[string]uint8, len(q.Classes)),
	}
	if q.TenantHeaderTrusted {
		fr.tenantHeader = q.TenantHeader
	}
	for _, h := range []string{q.ClassHeader, q.DeadlineHeader} {
		if strings.HasPrefix(strings.ToLower(h), "x-sluice-") {
			fr.own = append(fr.own, []byte(h))
		}
	}
	if q.TenantHeader != "" {
		fr.own = append(fr.own, []byte(q.TenantHeader))
	}
	for i, c := range q.Classes {
		fr.classes[strings.ToLower(c.Name)] = uint8(i + 1)
		fr.names = append(fr.names, c.Name)
		if c.Name == q.DefaultClass {
			fr.def = i
		}
	}
	return fr
}

// flow reads the flow of a request with headers h and body facts info,
// from client id whose policy at this provider is pp.
func (fr *flowRules) flow(h *fasthttp.RequestHeader, info *feedback.Request, id *identity, pp *providerPolicy) adaptive.Flow {
	f := adaptive.Flow{Prompt: info.PromptTokens, MaxOutput: info.MaxTokens, Tenant: fr.tenant(h, id), MaxInflight: id.pol.maxInflight}
	if fr.classHeader != "" {
		f.Class = fr.classID(h.Peek(fr.classHeader))
	}
	f.Class = fr.ceiled(f.Class, pp.ceiling)
	f.MaxWait = fr.clientWait(h)
	for _, name := range fr.retryHeaders {
		if positiveInt(h.Peek(name)) {
			f.Retry = true
			break
		}
	}
	return f
}

// clientWait returns the client's own deadline: the shortest of the
// deadline header's and the timeout headers' values (an SDK gives up on
// the request at the first of them); 0 when it sends none.
func (fr *flowRules) clientWait(h *fasthttp.RequestHeader) time.Duration {
	var w time.Duration
	if fr.deadlineHeader != "" {
		w = parseWait(h.Peek(fr.deadlineHeader))
	}
	for _, name := range fr.timeoutHeaders {
		if v := parseWait(h.Peek(name)); v > 0 && (w == 0 || v < w) {
			w = v
		}
	}
	return w
}

// classID returns the Flow.Class of a class header value (any case); 0
// (the default class) when it names no class.
func (fr *flowRules) classID(v []byte) uint8 {
	var buf [32]byte
	if len(v) == 0 || len(v) > len(buf) {
		return 0
	}
	for i, c := range v {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return fr.classes[string(buf[:len(v)])]
}

// ceiled returns class, or the class at index ceiling when class ranks
// above it: a client's class header may only lower its class below what
// its policy allows.
func (fr *flowRules) ceiled(class uint8, ceiling int) uint8 {
	if i := fr.index(class); i < ceiling {
		return uint8(ceiling + 1)
	}
	return class
}

// index returns the position of a Flow.Class in the class list.
func (fr *flowRules) index(class uint8) int {
	if class == 0 || int(class) > len(fr.names) {
		return fr.def
	}
	return int(class) - 1
}

// tenant returns the tenant of a request from client id: its policy's
// tenant; else a hash of the tenant header's value, when a trusted hop
// sets it; else of the client's API key (Authorization bearer token, else
// x-api-key); AnonymousTenant when there is none.
func (fr *flowRules) tenant(h *fasthttp.RequestHeader, id *identity) uint64 {
	if id.pol.tenant != 0 {
		return id.pol.tenant
	}
	if fr.tenantHeader != "" {
		if v := bytes.TrimSpace(h.Peek(fr.tenantHeader)); len(v) > 0 {
			return TenantID(v)
		}
		return adaptive.AnonymousTenant
	}
	if !id.hasKey {
		return adaptive.AnonymousTenant
	}
	return tenantOfSum(&id.sum)
}

// TenantID is the tenant id Sluice derives from a tenant key (an API key,
// or the value of queue.tenant_header): the first 8 bytes of its SHA-256.
// The status page shows it in hex, so an operator finds a key's tenant
// with `printf %s "$KEY" | sha256sum | cut -c1-16`; the key itself is
// never kept or shown.
func TenantID(key []byte) uint64 {
	sum := sha256.Sum256(key)
	id := binary.BigEndian.Uint64(sum[:8])
	if id == adaptive.AnonymousTenant || id == adaptive.OtherTenant {
		id = 1
	}
	return id
}

// parseWait reads a deadline header: a positive number of seconds ("2",
// "0.5") or of milliseconds, seconds or minutes with a unit ("1500ms",
// "2s", "1m"). 0 when it is not one.
func parseWait(v []byte) time.Duration {
	var whole, frac, scale int64 = 0, 0, 1
	i := 0
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
		if whole > 1e9 {
			return 0
		}
		whole = whole*10 + int64(v[i]-'0')
	}
	if i == 0 {
		return 0
	}
	if i < len(v) && v[i] == '.' {
		for i++; i < len(v) && v[i] >= '0' && v[i] <= '9'; i++ {
			if scale < 1e9 {
				frac, scale = frac*10+int64(v[i]-'0'), scale*10
			}
		}
	}
	unit := time.Second
	switch string(v[i:]) {
	case "", "s":
	case "ms":
		unit = time.Millisecond
	case "m":
		unit = time.Minute
	default:
		return 0
	}
	return time.Duration(whole)*unit + time.Duration(frac)*unit/time.Duration(scale)
}

// positiveInt reports whether v is a decimal integer above 0.
func positiveInt(v []byte) bool {
	nonZero := false
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
		nonZero = nonZero || c != '0'
	}
	return nonZero
}

// refusedOutcome is the outcome of a request the queue refused: over_share
// (429) when the provider had free permits but the request's class or
// tenant was at its share, else why the provider's queue could not take it
// (503).
func refusedOutcome(err error, r adaptive.Refusal) outcome {
	if r.OverShare {
		return outOverShare
	}
	switch {
	case errors.Is(err, adaptive.ErrDeadline):
		return outQueueDeadline
	case errors.Is(err, adaptive.ErrDisplaced):
		return outDisplaced
	case errors.Is(err, adaptive.ErrQueueTimeout):
		return outQueueTimeout
	}
	return outQueueFull
}

// tokenCost is the request's actual token usage, to settle its cost in the
// fair queue: input (the provider's usage, else the estimate) plus output
// (usage, else output deltas) of a metered response; 0, which keeps the
// estimate, when no response was metered.
func (st *stream) tokenCost() int {
	if !st.metered {
		return 0
	}
	r := st.meter.Result()
	in := r.InputTokens
	if in == 0 {
		in = st.info.PromptTokens
	}
	return in + r.OutputTokens
}
