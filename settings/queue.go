package settings

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Queue is a provider's wait queue (the queue: block): its bounds, the
// priority classes and their shares of the limit, and the request headers
// that name a request's tenant, class, deadline and retry.
type Queue struct {
	// MaxWaiting is the most requests waiting at once, all classes
	// together. Default 200, 0..1000000; 0 means no queue: reject at once
	// when the limit is reached.
	MaxWaiting int `yaml:"max_waiting"`
	// MaxWait is the deadline for a permit of a request whose client
	// sends no timeout of its own (DeadlineHeader, TimeoutHeaders).
	// Default 60s, 0..10m; 0 means no waiting. A client that sends no
	// timeout often waits for as long as it takes, but the load balancers
	// and HTTP clients in front of Sluice commonly give up on a response
	// that has sent nothing for a minute: refusing past that, with a
	// Retry-After, serves such a client better than a cut connection.
	MaxWait time.Duration `yaml:"max_wait"`
	// MaxClientWait caps the deadline a client's own timeout may ask for:
	// a request that sends one waits for a permit until its client's
	// timeout, up to the larger of MaxClientWait and MaxWait. Default 10m
	// (the official SDKs' own timeout), 0..1h; 0 lets a client's timeout
	// only shorten MaxWait.
	MaxClientWait time.Duration `yaml:"max_client_wait"`
	// Classes are the priority classes, highest priority first: a waiting
	// request of a class is always served before one of a later class
	// (when its class is under its share). 1..MaxClasses classes; default
	// interactive, standard, batch (see DefaultClasses).
	Classes []Class `yaml:"classes"`
	// DefaultClass is the class of a request that names none (or an
	// unknown one). It must be one of Classes. Default "standard".
	DefaultClass string `yaml:"default_class"`
	// ClassHeader is the request header naming the class. Default
	// "X-Sluice-Class"; "" means every request is in DefaultClass.
	ClassHeader string `yaml:"class_header"`
	// TenantHeader, when set, is the request header whose value names the
	// tenant, honoured only when TenantHeaderTrusted says a trusted hop in
	// front of Sluice sets it. Otherwise, and when "" (the default), the
	// tenant is the client's (clients:), else its API key (Authorization
	// bearer token or x-api-key). Either way only a hash of the value is
	// kept, and the header is removed before the upstream.
	TenantHeader string `yaml:"tenant_header"`
	// TenantHeaderTrusted declares that TenantHeader is set by a trusted
	// hop in front of Sluice, which overwrites what clients send: any
	// client could otherwise name another's tenant and spend its share.
	// Default false: the header is ignored.
	TenantHeaderTrusted bool `yaml:"tenant_header_trusted"`
	// DeadlineHeader is the request header with which a client states its
	// own deadline for a permit (a duration such as "1500ms", "2s", "1m",
	// or seconds), in place of MaxWait and capped by MaxClientWait.
	// Default "X-Sluice-Max-Wait"; "" turns it off.
	DeadlineHeader string `yaml:"deadline_header"`
	// TimeoutHeaders name request headers that carry the client's own
	// timeout in seconds ("600", "2.5"), read as DeadlineHeader is; when
	// several are sent the shortest counts. Default
	// ["x-stainless-timeout", "x-stainless-read-timeout"]: the OpenAI and
	// Anthropic SDKs send their timeout in them, and a request waits for
	// its first byte for that long before the SDK gives up on it.
	TimeoutHeaders []string `yaml:"timeout_headers"`
	// RetryHeaders name request headers whose value, an integer above 0,
	// marks the request as a client's retry: retries wait behind first
	// attempts of their class and are shed first. Default
	// ["x-stainless-retry-count"] (OpenAI and Anthropic SDKs).
	RetryHeaders []string `yaml:"retry_headers"`
	// MaxTenants bounds the tenants tracked at once. When it is reached an
	// idle tenant is forgotten; when none is idle, new tenants share one
	// "other" tenant. Default 1000, 1..1000000.
	MaxTenants int `yaml:"max_tenants"`
	// TenantMaxInflight caps the permits one tenant may hold at once; 0
	// (the default) means no cap. 0..MaxCeiling.
	TenantMaxInflight int `yaml:"tenant_max_inflight"`
	// SaturationTTFTRatio is the ratio of the controller's TTFT median to
	// its baseline at which the provider counts as saturated (lower
	// classes shrink to their saturated_share). Default 2, 1.1..100.
	SaturationTTFTRatio float64 `yaml:"saturation_ttft_ratio"`
	// SaturationHold is how long a drop (429, 529, 503, first-token
	// timeout) keeps the provider counted as saturated, fading linearly.
	// Default 10s, 0..10m; 0 ignores drops.
	SaturationHold time.Duration `yaml:"saturation_hold"`
}

// Class is one priority class of a queue (an entry of queue.classes).
type Class struct {
	// Name is how requests ask for the class (Queue.ClassHeader) and the
	// class label of metrics: 1..32 characters of a-z, 0-9, _ and -.
	Name string `yaml:"name"`
	// MaxShare is the largest fraction of the effective limit the class's
	// requests may hold at once when the provider is not saturated.
	// Default 1, (0, 1]. A share below 1 keeps permits free for the
	// classes above it, at the cost of leaving them idle when only this
	// class has work.
	MaxShare float64 `yaml:"max_share"`
	// SaturatedShare is the class's share when the provider is saturated
	// (see Queue.SaturationTTFTRatio and SaturationHold); between no
	// saturation and full saturation the share moves linearly from
	// MaxShare to SaturatedShare. Default MaxShare (no shrinking),
	// 0..MaxShare. A class always keeps at least one permit.
	SaturatedShare float64 `yaml:"saturated_share"`
}

// Bounds of the queue settings.
const (
	// MaxClasses bounds the number of priority classes of a queue.
	MaxClasses      = 8
	maxQueueWaiting = 1000000
	maxQueueWait    = 10 * time.Minute
	maxClientWait   = time.Hour
)

// DefaultQueue returns a queue of 200 waiting at most 60s each, or until
// their client's own timeout (X-Sluice-Max-Wait, x-stainless-timeout,
// x-stainless-read-timeout) up to 10m, the classes of DefaultClasses with
// "standard" the default, the class from X-Sluice-Class, retries
// recognised by x-stainless-retry-count, tenants by API key (at most 1000
// tracked, no per-tenant cap), saturation at twice the TTFT baseline or
// within 10s of a drop. Its lists are its own.
func DefaultQueue() Queue {
	return Queue{
		MaxWaiting:          200,
		MaxWait:             60 * time.Second,
		MaxClientWait:       10 * time.Minute,
		Classes:             DefaultClasses(),
		DefaultClass:        "standard",
		ClassHeader:         "X-Sluice-Class",
		DeadlineHeader:      "X-Sluice-Max-Wait",
		TimeoutHeaders:      []string{"x-stainless-timeout", "x-stainless-read-timeout"},
		RetryHeaders:        []string{"x-stainless-retry-count"},
		MaxTenants:          1000,
		SaturationTTFTRatio: 2,
		SaturationHold:      10 * time.Second,
	}
}

// DefaultClasses returns interactive (share 1), standard (share 1) and
// batch (at most 80% of the limit, shrinking to 25% as the provider
// saturates). With no class header sent every request is standard, and the
// queue behaves as one fair queue over tenants.
func DefaultClasses() []Class {
	return []Class{
		{Name: "interactive", MaxShare: 1, SaturatedShare: 1},
		{Name: "standard", MaxShare: 1, SaturatedShare: 1},
		{Name: "batch", MaxShare: 0.8, SaturatedShare: 0.25},
	}
}

// ClassID returns the position of the class called name (case-insensitive)
// in q.Classes plus one; 0 when no class has that name (the request goes to
// the default class).
func (q Queue) ClassID(name string) uint8 {
	for i, c := range q.Classes {
		if strings.EqualFold(c.Name, name) {
			return uint8(i + 1)
		}
	}
	return 0
}

// Complete fills in the defaults of the class entries the user wrote
// without them: max_share 1, and saturated_share equal to max_share. set
// reports whether a key of the queue block was written
// ("classes[0].max_share").
func (q Queue) Complete(set func(key string) bool) Queue {
	if !set("classes") {
		return q
	}
	cs := make([]Class, len(q.Classes))
	copy(cs, q.Classes)
	for i := range cs {
		key := fmt.Sprintf("classes[%d].", i)
		if !set(key + "max_share") {
			cs[i].MaxShare = 1
		}
		if !set(key + "saturated_share") {
			cs[i].SaturatedShare = cs[i].MaxShare
		}
	}
	q.Classes = cs
	return q
}

var (
	classNameRE  = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
)

// Problems lists every invalid queue setting: the bounds, the classes, the
// header names, the tenant bounds and the saturation settings.
func (q Queue) Problems() []Problem {
	var ps problems
	if q.MaxWaiting < 0 || q.MaxWaiting > maxQueueWaiting {
		ps.bad("max_waiting", "must be between 0 and %d, got %d", maxQueueWaiting, q.MaxWaiting)
	}
	ps.durIn("max_wait", q.MaxWait, 0, maxQueueWait)
	ps.durIn("max_client_wait", q.MaxClientWait, 0, maxClientWait)
	if n := len(q.Classes); n < 1 || n > MaxClasses {
		ps.bad("classes", "must list between 1 and %d classes, got %d", MaxClasses, n)
	}
	seen := map[string]int{}
	for i, c := range q.Classes {
		key := fmt.Sprintf("classes[%d].", i)
		switch j, dup := seen[c.Name]; {
		case !classNameRE.MatchString(c.Name):
			ps.bad(key+"name", "must be 1 to 32 characters of a-z, 0-9, _ and -, got %q", c.Name)
		case dup:
			ps.bad(key+"name", "duplicate class %q (also classes[%d])", c.Name, j)
		default:
			seen[c.Name] = i
		}
		if !(c.MaxShare > 0 && c.MaxShare <= 1) {
			ps.bad(key+"max_share", "must be greater than 0 and at most 1, got %v", c.MaxShare)
		} else if !(c.SaturatedShare >= 0 && c.SaturatedShare <= c.MaxShare) {
			ps.bad(key+"saturated_share", "must be between 0 and max_share (%v), got %v", c.MaxShare, c.SaturatedShare)
		}
	}
	if _, ok := seen[q.DefaultClass]; !ok && len(q.Classes) > 0 {
		names := make([]string, len(q.Classes))
		for i, c := range q.Classes {
			names[i] = c.Name
		}
		ps.bad("default_class", "must be one of the classes (%s), got %q", strings.Join(names, ", "), q.DefaultClass)
	}
	header := func(key, h string, optional bool) {
		if (h != "" || !optional) && !headerNameRE.MatchString(h) {
			ps.bad(key, "must be a header name (1 to 64 token characters), got %q", h)
		}
	}
	header("class_header", q.ClassHeader, true)
	header("tenant_header", q.TenantHeader, true)
	header("deadline_header", q.DeadlineHeader, true)
	for i, h := range q.TimeoutHeaders {
		header(fmt.Sprintf("timeout_headers[%d]", i), h, false)
	}
	for i, h := range q.RetryHeaders {
		header(fmt.Sprintf("retry_headers[%d]", i), h, false)
	}
	if q.MaxTenants < 1 || q.MaxTenants > maxQueueWaiting {
		ps.bad("max_tenants", "must be between 1 and %d, got %d", maxQueueWaiting, q.MaxTenants)
	}
	if q.TenantMaxInflight < 0 || q.TenantMaxInflight > MaxCeiling {
		ps.bad("tenant_max_inflight", "must be between 0 (no cap) and %d, got %d", MaxCeiling, q.TenantMaxInflight)
	}
	if r := q.SaturationTTFTRatio; !(r >= 1.1 && r <= 100) {
		ps.bad("saturation_ttft_ratio", "must be between 1.1 and 100, got %v", r)
	}
	ps.durIn("saturation_hold", q.SaturationHold, 0, maxQueueWait)
	return ps
}
