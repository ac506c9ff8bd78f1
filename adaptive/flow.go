package adaptive

import (
	"errors"
	"time"
)

// Flow is what the queue knows about one request: whose it is, how urgent,
// how expensive, how long it may wait, and whether it is a client's retry.
// The zero Flow is a first attempt of the anonymous tenant in the default
// class, with no prompt and no output bound, with the queue's max_wait as
// its deadline.
type Flow struct {
	// Tenant identifies who sent the request: a hash of the client's API
	// key or of a configured header (the proxy computes it; the raw value
	// never reaches adaptive). 0 is the anonymous tenant; requests of new
	// tenants beyond settings.Queue.MaxTenants count as OtherTenant.
	Tenant uint64
	// Class is the position of the request's class in
	// settings.Queue.Classes plus one (settings.Queue.ClassID); 0 or an
	// unknown value means the default class.
	Class uint8
	// Prompt is the request's estimated prompt size in tokens, and
	// MaxOutput the most output it may produce (its max_tokens; 0 when it
	// sets none). Fair sharing between tenants counts tokens, not
	// requests: the queue charges a request its prompt plus the output the
	// provider's requests have been producing, or MaxOutput when lower
	// (Limiter.flowCost), and Outcome.Tokens settles that to the actual
	// usage when the request ends. A cost below 1 counts as 1.
	Prompt    int
	MaxOutput int
	// MaxWait, when > 0, is the deadline for a permit the request's
	// client asked for (its own timeout): it replaces the queue's
	// max_wait, up to the larger of max_client_wait and max_wait
	// (Limiter.MaxWaitFor).
	MaxWait time.Duration
	// Retry marks a client's retry of an earlier attempt: it waits behind
	// the first attempts of its class and is shed before them.
	Retry bool
	// MaxInflight, when > 0, caps the permits the request's tenant may
	// hold at once instead of settings.Queue.TenantMaxInflight (its
	// client policy's max_inflight). Requests of one tenant carry the
	// same cap.
	MaxInflight int
}

// Tenant ids with a fixed meaning.
const (
	// AnonymousTenant is the tenant of requests that carry no tenant key.
	AnonymousTenant uint64 = 0
	// OtherTenant is shared by new tenants while MaxTenants tenants are
	// tracked and none of them is idle.
	OtherTenant uint64 = 1<<64 - 1
)

// Rejection errors returned by Acquire; Permit.Refusal says whether the
// flow was over its share and when to retry.
var (
	// ErrQueueFull: MaxWaiting requests already wait and none of them
	// ranks below this one.
	ErrQueueFull = errors.New("adaptive: wait queue full")
	// ErrQueueTimeout: no permit came within the request's deadline.
	ErrQueueTimeout = errors.New("adaptive: waited until the deadline")
	// ErrDeadline: the wait estimated at enqueue exceeds the request's
	// deadline, so it is refused at once instead of timing out later.
	ErrDeadline = errors.New("adaptive: estimated wait exceeds the deadline")
	// ErrDisplaced: the request was waiting and was pushed out of a full
	// queue by a request of a higher priority (or a first attempt, for a
	// retry).
	ErrDisplaced = errors.New("adaptive: displaced from a full queue")
	// ErrCanceled: the client went away while waiting; nothing is sent.
	ErrCanceled = errors.New("adaptive: canceled while waiting")
)

// Refusal describes why Acquire refused a request, for the answer.
type Refusal struct {
	// OverShare: the provider had free permits, but this request's class
	// (or tenant) was at its share. When false, the provider itself was at
	// its limit.
	OverShare bool
	// RetryAfter is the wait estimated for a request of the same flow
	// arriving now: the time the queue ahead of it needs to drain at the
	// current rate. 0 when there is no estimate yet (no permit has been
	// released).
	RetryAfter time.Duration
}
