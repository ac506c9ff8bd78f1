package adaptive

import "github.com/sluicehq/sluice/feedback"

// TEMPORARY: built from the former switches to record answers.golden.

type StatusClass uint8

const (
	StatusNone StatusClass = iota
	StatusSuccess
	StatusRateLimited
	StatusUnavailable
	StatusOverloaded
	StatusServerError
	StatusOther
	numStatusClasses
)

func (s StatusClass) String() string {
	return [...]string{"none", "2xx", "429", "503", "529", "other_5xx", "other"}[s]
}

const numAttemptFailures = AttemptCanceled + 1

func (f AttemptFailure) String() string {
	return [...]string{"answer", "connect", "reset", "timeout", "broke", "canceled"}[f]
}

func (v breakerVerdict) String() string {
	return [...]string{"neutral", "success", "failure", "quota"}[v]
}

func (r retryClass) String() string {
	return [...]string{"never", "anywhere", "elsewhere"}[r]
}

type Meaning struct {
	Controller  Outcome
	Breaker     breakerVerdict
	Busy        bool
	Retry       retryClass
	Failed      bool
	QuotaRefund bool
	Client      string
}

func oldDropKind(status int, class feedback.ErrorClass) DropKind {
	switch {
	case class == feedback.ErrTimeout:
		return DropTimeout
	case status == 429 || class == feedback.ErrRateLimit:
		return DropRateLimit
	case status == 529 || class == feedback.ErrOverloaded:
		return DropOverloaded
	default:
		return DropUnavailable
	}
}

func MeaningOf(r AttemptResult) Meaning {
	st, cl := r.Status, r.Class
	if r.Failure != AttemptOK {
		st, cl = 0, feedback.ErrOther
		if r.Failure == AttemptTimeout {
			cl = feedback.ErrTimeout
		}
	}
	var ctl Outcome
	switch feedback.Judge(st, cl) {
	case feedback.Success:
		ctl = Outcome{Kind: OutcomeSuccess}
	case feedback.Drop:
		ctl = Outcome{Kind: OutcomeDrop, Drop: oldDropKind(st, cl)}
	}
	client := "relay"
	if r.Failure != AttemptOK {
		client = "sluice"
	}
	return Meaning{
		Controller:  ctl,
		Breaker:     verdictOf(r),
		Busy:        busy(r),
		Retry:       classOf(r),
		Failed:      failed(r),
		QuotaRefund: r.Status == 429 && r.Class != feedback.ErrInsufficientQuota,
		Client:      client,
	}
}

func (k OutcomeKind) String() string {
	return [...]string{"ignore", "success", "drop"}[k]
}
