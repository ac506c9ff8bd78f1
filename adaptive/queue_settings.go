package adaptive

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// MaxClasses bounds the number of priority classes of a queue.
const MaxClasses = 8

// ClassSettings are one priority class of a queue.
type ClassSettings struct {
	// Name is how requests ask for the class (ClassHeader) and the class
	// label of metrics: 1..32 characters of a-z, 0-9, _ and -.
	Name string
	// MaxShare is the largest fraction of the effective limit the class's
	// requests may hold at once when the provider is not saturated.
	// Default 1, (0, 1]. A share below 1 keeps permits free for the
	// classes above it, at the cost of leaving them idle when only this
	// class has work.
	MaxShare float64
	// SaturatedShare is the class's share when the provider is saturated
	// (see QueueSettings.SaturationTTFTRatio and SaturationHold); between
	// no saturation and full saturation the share moves linearly from
	// MaxShare to SaturatedShare. Default MaxShare (no shrinking),
	// 0..MaxShare. A class always keeps at least one permit.
	SaturatedShare float64
}

// DefaultClasses returns interactive (share 1), standard (share 1) and
// batch (at most 80% of the limit, shrinking to 25% as the provider
// saturates). With no class header sent every request is standard, and the
// queue behaves as one fair queue over tenants.
func DefaultClasses() []ClassSettings {
	return []ClassSettings{
		{Name: "interactive", MaxShare: 1, SaturatedShare: 1},
		{Name: "standard", MaxShare: 1, SaturatedShare: 1},
		{Name: "batch", MaxShare: 0.8, SaturatedShare: 0.25},
	}
}

// ClassID returns the position of the class called name (case-insensitive)
// in q.Classes plus one, the value of Flow.Class; 0 when no class has that
// name (the request goes to the default class).
func (q QueueSettings) ClassID(name string) uint8 {
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
func (q QueueSettings) Complete(set func(param string) bool) QueueSettings {
	if !set("classes") {
		return q
	}
	cs := make([]ClassSettings, len(q.Classes))
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

// flowProblems checks the classes, the header names, the tenant bounds
// and the saturation settings.
func (q QueueSettings) flowProblems() []Problem {
	var ps []Problem
	bad := func(param, format string, a ...any) {
		ps = append(ps, Problem{Param: param, Msg: fmt.Sprintf(format, a...)})
	}
	if n := len(q.Classes); n < 1 || n > MaxClasses {
		bad("classes", "must list between 1 and %d classes, got %d", MaxClasses, n)
	}
	seen := map[string]int{}
	for i, c := range q.Classes {
		key := fmt.Sprintf("classes[%d].", i)
		switch j, dup := seen[c.Name]; {
		case !classNameRE.MatchString(c.Name):
			bad(key+"name", "must be 1 to 32 characters of a-z, 0-9, _ and -, got %q", c.Name)
		case dup:
			bad(key+"name", "duplicate class %q (also classes[%d])", c.Name, j)
		default:
			seen[c.Name] = i
		}
		if !(c.MaxShare > 0 && c.MaxShare <= 1) {
			bad(key+"max_share", "must be greater than 0 and at most 1, got %v", c.MaxShare)
		} else if !(c.SaturatedShare >= 0 && c.SaturatedShare <= c.MaxShare) {
			bad(key+"saturated_share", "must be between 0 and max_share (%v), got %v", c.MaxShare, c.SaturatedShare)
		}
	}
	if _, ok := seen[q.DefaultClass]; !ok && len(q.Classes) > 0 {
		names := make([]string, len(q.Classes))
		for i, c := range q.Classes {
			names[i] = c.Name
		}
		bad("default_class", "must be one of the classes (%s), got %q", strings.Join(names, ", "), q.DefaultClass)
	}
	header := func(param, h string, optional bool) {
		if (h != "" || !optional) && !headerNameRE.MatchString(h) {
			bad(param, "must be a header name (1 to 64 token characters), got %q", h)
		}
	}
	header("class_header", q.ClassHeader, true)
	header("tenant_header", q.TenantHeader, true)
	header("deadline_header", q.DeadlineHeader, true)
	for i, h := range q.RetryHeaders {
		header(fmt.Sprintf("retry_headers[%d]", i), h, false)
	}
	if q.MaxTenants < 1 || q.MaxTenants > maxQueueWaiting {
		bad("max_tenants", "must be between 1 and %d, got %d", maxQueueWaiting, q.MaxTenants)
	}
	if q.TenantMaxInflight < 0 || q.TenantMaxInflight > MaxCeiling {
		bad("tenant_max_inflight", "must be between 0 (no cap) and %d, got %d", MaxCeiling, q.TenantMaxInflight)
	}
	if r := q.SaturationTTFTRatio; !(r >= 1.1 && r <= 100) {
		bad("saturation_ttft_ratio", "must be between 1.1 and 100, got %v", r)
	}
	if h := q.SaturationHold; h < 0 || h > 10*time.Minute {
		bad("saturation_hold", "must be between 0s and 10m, got %s", fmtDur(h))
	}
	return ps
}
