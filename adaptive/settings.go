package adaptive

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
)

// The limit settings, their defaults and ranges are the controller's
// (control/settings.go); adaptive uses them under the names its callers
// have always used.

// Settings are a provider's limit parameters (control.Settings).
type Settings = control.Settings

// Problem is one invalid setting (control.Problem).
type Problem = control.Problem

// Algorithm names accepted in Settings.Algorithm.
const (
	AlgorithmGradient2 = control.AlgorithmGradient2
	AlgorithmAIMD      = control.AlgorithmAIMD
	AlgorithmFixed     = control.AlgorithmFixed
)

// MaxCeiling is the highest ceiling a limit may have.
const MaxCeiling = control.MaxCeiling

// MaxRetryAfter is the longest a provider's Retry-After freezes limit
// growth (control.MaxRetryAfter).
const MaxRetryAfter = control.MaxRetryAfter

// DefaultSettings returns the default limit settings
// (control.DefaultSettings).
func DefaultSettings() Settings { return control.DefaultSettings() }

// DeprecatedParams lists the limit parameters that are still accepted but
// no longer do anything (control.DeprecatedParams).
func DeprecatedParams() map[string]string { return control.DeprecatedParams() }

// fmtDur prints a duration without trailing zero units: 5m, 1h, 1m30s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// QueueSettings configure a provider's wait queue: its bounds, the
// priority classes and their shares of the limit, and how the proxy reads
// a request's flow (tenant, class, deadline, retry) from its headers. The
// defaults, the derived defaults (Complete) and the valid ranges (Problems)
// are decided here and in queue_settings.go; config gets them through
// proxy.ConfigRules.
type QueueSettings struct {
	// MaxWaiting is the most requests waiting at once, all classes
	// together. Default 200, 0..1000000; 0 means no queue: reject at once
	// when the limit is reached.
	MaxWaiting int
	// MaxWait is the longest a request waits for a permit, and the
	// deadline of a request that does not ask for a shorter one. Default
	// 10s, 0..10m; 0 means no waiting.
	MaxWait time.Duration

	// Classes are the priority classes, highest priority first: a waiting
	// request of a class is always served before one of a later class
	// (when its class is under its share). 1..MaxClasses classes; default
	// interactive, standard, batch (see DefaultClasses).
	Classes []ClassSettings
	// DefaultClass is the class of a request that names none (or an
	// unknown one). It must be one of Classes. Default "standard".
	DefaultClass string
	// ClassHeader is the request header naming the class. Default
	// "X-Sluice-Class"; "" means every request is in DefaultClass.
	ClassHeader string
	// TenantHeader, when set, is the request header whose value names the
	// tenant. "" (the default) takes the tenant from the client's API key
	// (Authorization bearer token or x-api-key). Either way only a hash of
	// the value is kept.
	TenantHeader string
	// DeadlineHeader is the request header with which a client asks for a
	// shorter wait than MaxWait (a Go duration such as "2s", or seconds).
	// Default "X-Sluice-Max-Wait"; "" turns it off.
	DeadlineHeader string
	// RetryHeaders name request headers whose value, an integer above 0,
	// marks the request as a client's retry: retries wait behind first
	// attempts of their class and are shed first. Default
	// ["x-stainless-retry-count"] (OpenAI and Anthropic SDKs).
	RetryHeaders []string
	// MaxTenants bounds the tenants tracked at once. When it is reached an
	// idle tenant is forgotten; when none is idle, new tenants share one
	// "other" tenant. Default 1000, 1..1000000.
	MaxTenants int
	// TenantMaxInflight caps the permits one tenant may hold at once; 0
	// (the default) means no cap. 0..MaxCeiling.
	TenantMaxInflight int
	// SaturationTTFTRatio is the ratio of the controller's TTFT median to
	// its baseline at which the provider counts as saturated (lower
	// classes shrink to their saturated_share). Default 2, 1.1..100.
	SaturationTTFTRatio float64
	// SaturationHold is how long a drop (429, 529, 503, first-token
	// timeout) keeps the provider counted as saturated, fading linearly.
	// Default 10s, 0..10m; 0 ignores drops.
	SaturationHold time.Duration
}

const maxQueueWaiting = 1000000

// DefaultQueueSettings returns a queue of 200 waiting at most 10 s each,
// the classes of DefaultClasses with "standard" the default, the class
// from X-Sluice-Class, a shorter deadline from X-Sluice-Max-Wait, retries
// recognised by x-stainless-retry-count, tenants by API key (at most 1000
// tracked, no per-tenant cap), saturation at twice the TTFT baseline or
// within 10 s of a drop.
func DefaultQueueSettings() QueueSettings {
	return QueueSettings{
		MaxWaiting:          200,
		MaxWait:             10 * time.Second,
		Classes:             DefaultClasses(),
		DefaultClass:        "standard",
		ClassHeader:         "X-Sluice-Class",
		DeadlineHeader:      "X-Sluice-Max-Wait",
		RetryHeaders:        []string{"x-stainless-retry-count"},
		MaxTenants:          1000,
		SaturationTTFTRatio: 2,
		SaturationHold:      10 * time.Second,
	}
}

// Problems lists every invalid queue setting; Param is the YAML key of the
// queue block ("max_wait", "classes[1].max_share").
func (q QueueSettings) Problems() []Problem {
	var ps []Problem
	if q.MaxWaiting < 0 || q.MaxWaiting > maxQueueWaiting {
		ps = append(ps, Problem{Param: "max_waiting", Msg: fmt.Sprintf("must be between 0 and %d, got %d", maxQueueWaiting, q.MaxWaiting)})
	}
	if q.MaxWait < 0 || q.MaxWait > 10*time.Minute {
		ps = append(ps, Problem{Param: "max_wait", Msg: fmt.Sprintf("must be between 0s and 10m, got %s", fmtDur(q.MaxWait))})
	}
	return append(ps, q.flowProblems()...)
}

// LimiterSettings are everything a provider's Limiter is built from.
type LimiterSettings struct {
	Limit Settings
	Queue QueueSettings
}
