package adaptive

import (
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
)

// This file is the one table of what an upstream answer means: for every
// way an attempt can end (how it failed, the class of its HTTP status and
// the class of its error body or event), what the controller, the breaker,
// the retry policy, the quota and the client make of it. The controller
// hears it through the proxy (Permit.Finish, Attempt.Observe), the breaker
// and the quota through Attempt.Finish and Attempt.Learn, the retry policy
// through RetryPolicy.Decide; none of them decides on its own.
// testdata/answers.golden holds every cell, and TestAnswerTableGolden
// fails when one moves or a new failure, status class or error class has
// no row.

// StatusClass groups the HTTP statuses that mean the same to everyone who
// learns from an answer.
type StatusClass uint8

const (
	StatusNone        StatusClass = iota // no HTTP status: the attempt failed before one arrived
	StatusSuccess                        // 2xx
	StatusRateLimited                    // 429
	StatusUnavailable                    // 503
	StatusOverloaded                     // 529
	StatusServerError                    // any other 5xx
	StatusOther                          // 1xx, 3xx, 4xx but 429, and anything outside 1xx-5xx
	// StatusAccountLimited is a 429 that carries the provider's rate-limit
	// headers: the account's quota refused the request (its key's, for
	// the model it named), not the provider's capacity. Every client of
	// the provider shares its capacity, but each account has its own
	// quota: the refusal and its Retry-After belong to that account's
	// learned quota, not to the shared limit. A 429 without them (a
	// server at capacity, a gateway in front) stays StatusRateLimited.
	StatusAccountLimited
	numStatusClasses
)

// String returns a short name of s, for tests and the golden table.
func (s StatusClass) String() string {
	return [...]string{"none", "2xx", "429", "503", "529", "other_5xx", "other", "429_account", "?"}[min(s, numStatusClasses)]
}

// StatusClassOf returns the class of an HTTP status (0: none arrived).
func StatusClassOf(status int) StatusClass {
	switch {
	case status == 0:
		return StatusNone
	case status >= 200 && status < 300:
		return StatusSuccess
	case status == 429:
		return StatusRateLimited
	case status == 503:
		return StatusUnavailable
	case status == 529:
		return StatusOverloaded
	case status >= 500 && status < 600:
		return StatusServerError
	}
	return StatusOther
}

// ClientAnswer is what the client gets for an attempt's end when it is the
// request's last.
type ClientAnswer uint8

const (
	// ClientRelay: the upstream's answer, status and body, passed through.
	ClientRelay ClientAnswer = iota
	// ClientSluice: Sluice's own answer for how the attempt failed (502,
	// 504, ...: the proxy's outcome table), or, once a stream has started,
	// the stream cut without its end.
	ClientSluice
)

// String returns "relay" or "sluice".
func (c ClientAnswer) String() string {
	if c == ClientRelay {
		return "relay"
	}
	return "sluice"
}

// Meaning is one row of the answer table.
type Meaning struct {
	// Controller is what the upstream's and the provider's controllers
	// hear: success, ignore, or a drop of a kind. RetryAfter is not set:
	// whoever has the provider's Retry-After adds it to a drop.
	Controller Outcome
	// Breaker is what the upstream's circuit breaker counts.
	Breaker breakerVerdict
	// Busy: the upstream says it is busy (a 503, a 529, an overloaded
	// error) rather than broken; on the last usable upstream such a
	// failure does not count for its breaker (Attempt.Finish).
	Busy bool
	// Failed: the attempt failed, so the retry policy is asked at all.
	Failed bool
	// Retry says where the retry policy may send the request again. A
	// retry that goes back to the same upstream waits for its Retry-After.
	Retry retryClass
	// QuotaRefund: the provider refused the request for its rate limit and
	// counted nothing, so the request's quota claim is given back.
	QuotaRefund bool
	// Client is what the client gets when no retry follows.
	Client ClientAnswer
}

// breakerVerdict is what an attempt's result means to the breaker.
type breakerVerdict uint8

const (
	verdictNeutral breakerVerdict = iota
	verdictSuccess
	verdictFailure
	verdictQuota // a billing or quota error: open at once, for long
)

// retryClass is how a failed attempt may be retried.
type retryClass uint8

const (
	retryNever     retryClass = iota
	retryAnywhere             // the same upstream may take it (after its Retry-After, if any, and the backoff)
	retryElsewhere            // only another upstream may: this one is broken or too slow
)

// numAttemptFailures bounds AttemptFailure values.
const numAttemptFailures = AttemptCanceled + 1

// String returns a short name of f, for tests and the golden table.
func (f AttemptFailure) String() string {
	return [...]string{"answer", "connect", "reset", "timeout", "broke", "canceled", "?"}[min(f, numAttemptFailures)]
}

// answers holds every row, computed once from the rules below.
var answers = func() (t [numAttemptFailures][numStatusClasses][feedback.NumErrorClasses]Meaning) {
	for f := range numAttemptFailures {
		for s := range numStatusClasses {
			for c := range feedback.NumErrorClasses {
				t[f][s][c] = meaning(f, s, c)
			}
		}
	}
	return t
}()

// MeaningOf returns the row of the answer table for an attempt that ended
// with r (its Failure, Status, RateLimitHeaders and Class; the rest of r
// is not read). It does not allocate.
func MeaningOf(r AttemptResult) Meaning {
	f, c := r.Failure, r.Class
	if f >= numAttemptFailures || c >= feedback.NumErrorClasses {
		return Meaning{Breaker: verdictNeutral, Client: ClientSluice}
	}
	s := StatusClassOf(r.Status)
	if s == StatusRateLimited && r.RateLimitHeaders {
		s = StatusAccountLimited
	}
	return answers[f][s][c]
}

// AnswerMeaning is MeaningOf for an HTTP answer (or an error event in
// one) with status and error class.
func AnswerMeaning(status int, class feedback.ErrorClass) Meaning {
	return MeaningOf(AttemptResult{Status: status, Class: class})
}

// meaning is the table's rules, one column at a time.
func meaning(f AttemptFailure, s StatusClass, c feedback.ErrorClass) Meaning {
	m := Meaning{
		Controller:  controllerMeaning(f, s, c),
		Breaker:     breakerMeaning(f, s, c),
		Busy:        f == AttemptOK && (c == feedback.ErrOverloaded || c == feedback.ErrUnavailable),
		Failed:      f != AttemptOK || s != StatusSuccess || c != feedback.ErrNone,
		Retry:       retryMeaning(f, s, c),
		QuotaRefund: (s == StatusRateLimited || s == StatusAccountLimited) && c != feedback.ErrInsufficientQuota,
	}
	if f != AttemptOK {
		m.Client = ClientSluice
	}
	return m
}

// controllerMeaning is what the controllers hear:
//
//   - a first-token timeout: a drop (a failure before any answer says
//     nothing else about capacity: ignore);
//   - a timeout or overloaded error, whatever the status: a drop;
//   - no status: ignore;
//   - 529 and 503, whatever the error: a drop;
//   - 429: ignore for insufficient_quota (billing, not congestion), else a
//     drop;
//   - 429 with the provider's rate-limit headers: ignore (the account's
//     quota refused it, which that account's learned quota answers);
//   - 2xx: success without an error; a drop for a rate-limit error in the
//     body or stream; ignore for any other error;
//   - anything else (other 4xx, 500, 502, 504, other 5xx, 1xx, 3xx):
//     ignore.
//
// A drop's kind is the timeout, else the rate limit (429 or a rate-limit
// error), else the overload (529 or an overloaded error), else the
// unavailability.
func controllerMeaning(f AttemptFailure, s StatusClass, c feedback.ErrorClass) Outcome {
	if f != AttemptOK {
		if f == AttemptTimeout {
			return Outcome{Kind: OutcomeDrop, Drop: control.DropTimeout}
		}
		return Outcome{}
	}
	drop := true
	switch {
	case c == feedback.ErrTimeout, c == feedback.ErrOverloaded:
	case s == StatusNone:
		drop = false
	case s == StatusOverloaded, s == StatusUnavailable:
	case s == StatusRateLimited:
		drop = c != feedback.ErrInsufficientQuota
	case s == StatusAccountLimited:
		drop = false
	case s == StatusSuccess && c == feedback.ErrNone:
		return Outcome{Kind: OutcomeSuccess}
	case s == StatusSuccess && c == feedback.ErrRateLimit:
	default:
		drop = false
	}
	if !drop {
		return Outcome{}
	}
	k := control.DropUnavailable
	switch {
	case c == feedback.ErrTimeout:
		k = control.DropTimeout
	case s == StatusRateLimited || c == feedback.ErrRateLimit:
		k = control.DropRateLimit
	case s == StatusOverloaded || c == feedback.ErrOverloaded:
		k = control.DropOverloaded
	}
	return Outcome{Kind: OutcomeDrop, Drop: k}
}

// breakerMeaning is what the breaker counts. A failure is what says the
// upstream is broken: a connect error, a reset before the response, a
// first-token timeout, a connection that broke mid-body, a 5xx, an error
// in a 2xx body or stream naming a server-side error. A quota or billing
// error opens it at once, whatever the status. A 2xx without an error,
// or with a rate-limit or invalid-request error, is a success. Client
// errors (4xx), rate limiting (for which the rate layer and the adaptive
// limit are the answer) and cancellations are neither.
func breakerMeaning(f AttemptFailure, s StatusClass, c feedback.ErrorClass) breakerVerdict {
	switch f {
	case AttemptCanceled:
		return verdictNeutral
	case AttemptConnect, AttemptReset, AttemptTimeout, AttemptBroke:
		return verdictFailure
	}
	switch {
	case c == feedback.ErrInsufficientQuota:
		return verdictQuota
	case s == StatusUnavailable, s == StatusOverloaded, s == StatusServerError:
		return verdictFailure
	case s == StatusSuccess:
		switch c {
		case feedback.ErrNone, feedback.ErrRateLimit, feedback.ErrInvalidRequest:
			return verdictSuccess
		case feedback.ErrServer, feedback.ErrOverloaded, feedback.ErrUnavailable, feedback.ErrTimeout:
			return verdictFailure
		}
	}
	return verdictNeutral
}

// retryMeaning says how an attempt may be retried:
//
//   - a connect error and a reset before the response headers: anywhere
//     (nothing was answered);
//   - 429 rate limiting, 529, 503: anywhere, after Retry-After when the
//     retry goes back to the same upstream;
//   - 500, 502, 504 and other 5xx, and a first-token timeout: elsewhere
//     only (repeating them on the same upstream rarely helps);
//   - a rate-limit or overloaded error in a 2xx body: anywhere; a server
//     or unavailable one: elsewhere;
//   - never: 400, 401, 403, 404, 413, 422 and every other 4xx;
//     insufficient_quota and other billing errors, invalid requests
//     (context length exceeded), authentication and not-found errors
//     whatever the status; a connection that broke after the headers; a
//     cancellation.
func retryMeaning(f AttemptFailure, s StatusClass, c feedback.ErrorClass) retryClass {
	switch f {
	case AttemptConnect, AttemptReset:
		return retryAnywhere
	case AttemptTimeout:
		return retryElsewhere
	case AttemptBroke, AttemptCanceled:
		return retryNever
	}
	switch c {
	case feedback.ErrInsufficientQuota, feedback.ErrInvalidRequest, feedback.ErrAuth, feedback.ErrNotFound:
		return retryNever
	}
	switch s {
	case StatusRateLimited, StatusAccountLimited, StatusOverloaded, StatusUnavailable:
		return retryAnywhere
	case StatusServerError:
		return retryElsewhere
	case StatusSuccess:
		switch c {
		case feedback.ErrRateLimit, feedback.ErrOverloaded:
			return retryAnywhere
		case feedback.ErrServer, feedback.ErrUnavailable:
			return retryElsewhere
		}
	}
	return retryNever
}

// String returns the metric label value of k ("ignore", "success",
// "drop").
func (k OutcomeKind) String() string {
	return [...]string{"ignore", "success", "drop", "?"}[min(k, OutcomeDrop+1)]
}

func (v breakerVerdict) String() string {
	return [...]string{"neutral", "success", "failure", "quota", "?"}[min(v, verdictQuota+1)]
}

func (r retryClass) String() string {
	return [...]string{"never", "anywhere", "elsewhere", "?"}[min(r, retryElsewhere+1)]
}

// Heard is what the controller hears for m when the provider asked to
// wait retryAfter (0: it did not say): the Controller column, with the
// Retry-After on a drop.
func (m Meaning) Heard(retryAfter time.Duration) Outcome {
	o := m.Controller
	if o.Kind == OutcomeDrop {
		o.RetryAfter = retryAfter
	}
	return o
}
